"""KEDA's gRPC under thousands of calls at once: what each call is answered, how fast, and the server's peak memory,
with grpc's ``maximum_concurrent_rpcs`` (``scaler.keda.server.build_server``'s ``max_concurrent_calls``) at a few
values (issue 17).

The server runs in a process of its own (as ``bench/keda.py``'s: kvpilot's ExternalScaler over 1,000 deployments'
decisions plus grpc's health service, ``build_server``'s options). This process sends N ``GetMetrics`` calls at once
on one channel (KEDA keeps one per ``scalerAddress``), each with a ``--deadline`` (30 s, as
``bench/native/keda_client.cc``'s), from a client process of its own, and counts the answers by status code: OK,
RESOURCE_EXHAUSTED (refused by the bound), DEADLINE_EXCEEDED, CANCELLED, others; OK's p50/p99 latency, the latest
refusal's latency, and the server's peak RSS (``VmHWM``), its RSS before the burst, each run on a fresh server.

  nice -n 19 .venv/bin/python bench/keda_burst.py --calls 1000 3000 5000 --limits none 100 1000 --runs 3
  nice -n 19 .venv/bin/python bench/keda_burst.py --limits none --pending default 5000:10000 10000:20000

``--pending SOFT:HARD``: grpc core's backlog of calls received but not yet taken by the application
(``grpc.server.max_pending_requests``, ``..._hard_limit``; 1000 and 3000 by default, between them calls are
rejected at random, at the hard limit every one: the client sees CANCELLED). ``--options NAME=VALUE,...``: other grpc
settings over the server's, interleaved as the others. ``--metadata-bytes N``: every call but the first carries N
characters of one more metadata value, as a broken or hostile caller's would (the server's memory with large calls):

  nice -n 19 .venv/bin/python bench/keda_burst.py --calls 5000 --limits none --metadata-bytes 60000 \
      --options default grpc.max_receive_message_length=65536,grpc.http2.lookahead_bytes=65536,grpc.http2.bdp_probe=1

One JSON line per run; last line ``calls N limit L ok O refused R cancelled C p99_ms P rss_peak_mb M`` (last run).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc

OBJECTS = 1000


def _ref(i: int, pad: int = 0) -> pb.ScaledObjectRef:
    """The i-th ScaledObject's ref; ``pad``: characters of one more metadata value (a broken or hostile caller's)."""
    ref = pb.ScaledObjectRef(name=f"model-{i % OBJECTS}", namespace=f"team-{i % OBJECTS % 20}")
    if pad:
        ref.scalerMetadata["pad"] = "x" * pad
    return ref


async def _serve(limit: int | None, pending: str, grpc_options: str) -> None:
    """Server process: prints its port, serves until stdin closes. ``pending``: "SOFT:HARD", grpc core's backlog of
    calls received but not yet taken by the application (``grpc.server.max_pending_requests[_hard_limit]``), or
    "default": the server's options as they are. ``grpc_options``: "NAME=VALUE,..." of grpc's integer channel
    arguments set over the server's (``grpc.max_receive_message_length=65536``), or "default"."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from scaler.keda import server as server_mod

    options = dict(server_mod.SERVER_OPTIONS)
    if pending != "default":
        soft, hard = (int(v) for v in pending.split(":"))
        options |= {"grpc.server.max_pending_requests": soft, "grpc.server.max_pending_requests_hard_limit": hard}
    if grpc_options != "default":
        options |= {name: int(value) for name, value in (o.split("=") for o in grpc_options.split(","))}
    server_mod.SERVER_OPTIONS = tuple(options.items())

    from collector.clock import WallClock
    from scaler.decision import Decision
    from scaler.keda.reader import DecisionReader
    from scaler.keda.server import build_server, register_external_scaler
    from scaler.keda.servicer import ExternalScalerServicer
    from scaler.publish import DecisionBoard

    board = DecisionBoard()
    for i in range(OBJECTS):
        ref = _ref(i)
        board.publish(Decision(f"{ref.namespace}/{ref.name}", time.time(), 3, 3, 4, 1, "predictive", "bench"))
    health_servicer = health.aio.HealthServicer()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server, port = build_server(
        "127.0.0.1:0",
        [
            register_external_scaler(ExternalScalerServicer(DecisionReader(board, WallClock(), 0))),
            lambda s: health_pb2_grpc.add_HealthServicer_to_server(health_servicer, s),
        ],
        max_concurrent_calls=limit,
    )
    await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(None)


async def _burst(port: int, calls: int, deadline_s: float, pad: int) -> dict[str, Any]:
    """Client process: N calls at once on one channel (each but the first ``pad`` characters larger); their codes and
    latencies."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        requests = [
            pb.GetMetricsRequest(scaledObjectRef=_ref(i, pad if i else 0), metricName="kvpilot-replicas")
            for i in range(calls)
        ]
        await stub.GetMetrics(requests[0], timeout=deadline_s)  # the connection up before the burst
        answers: list[tuple[str, float]] = []

        async def one(request: pb.GetMetricsRequest) -> None:
            t0 = time.perf_counter()
            try:
                await stub.GetMetrics(request, timeout=deadline_s)
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
            answers.append((code, time.perf_counter() - t0))

        t0 = time.perf_counter()
        await asyncio.gather(*(one(r) for r in requests))
        took = time.perf_counter() - t0
    by_code: dict[str, int] = {}
    for code, _ in answers:
        by_code[code] = by_code.get(code, 0) + 1
    ok = sorted(s for code, s in answers if code == "OK")
    refused = [s for code, s in answers if code == "RESOURCE_EXHAUSTED"]
    return {
        "by_code": by_code,
        "ok_p50_ms": round(statistics.median(ok) * 1e3, 1) if ok else None,
        "ok_p99_ms": round(ok[min(len(ok) - 1, int(0.99 * len(ok)))] * 1e3, 1) if ok else None,
        "refused_max_ms": round(max(refused) * 1e3, 1) if refused else None,
        "burst_s": round(took, 2),
    }


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _run(calls: int, limit: int | None, pending: str, grpc_options: str, deadline_s: float, pad: int) -> dict[str, Any]:
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--limit",
            str(limit or 0),
            "--pending",
            pending,
            "--options",
            grpc_options,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        rss_before = _kb(server.pid, "VmRSS")
        client = subprocess.run(
            [
                *(sys.executable, __file__, "--client", str(port), "--calls", str(calls)),
                *("--deadline", str(deadline_s), "--metadata-bytes", str(pad)),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        result: dict[str, Any] = json.loads(client.stdout.strip().splitlines()[-1])
        result.update(rss_before_mb=round(rss_before / 1024, 1), rss_peak_mb=round(_kb(server.pid, "VmHWM") / 1024, 1))
        return result
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, nargs="+", default=[1000, 3000, 5000])
    p.add_argument("--limits", nargs="+", default=["none", "100", "1000"], help="max_concurrent_calls; none: no bound")
    p.add_argument(
        "--pending", nargs="+", default=["default"], help='grpc core\'s pending-call backlog, "SOFT:HARD" or default'
    )
    p.add_argument(
        "--options",
        nargs="+",
        default=["default"],
        help="grpc channel arguments set over the server's, NAME=VALUE,... (integers), or default",
    )
    p.add_argument(
        "--metadata-bytes", type=int, default=0, help="every call but the first this many characters of metadata more"
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--deadline", type=float, default=30.0, help="each call's deadline, s")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--limit", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--client", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        asyncio.run(_serve(args.limit or None, args.pending[0], args.options[0]))
        return
    if args.client:
        print(
            json.dumps(asyncio.run(_burst(args.client, args.calls[0], args.deadline, args.metadata_bytes))), flush=True
        )
        return
    last: dict[str, Any] = {}
    for calls in args.calls:
        for run in range(args.runs):
            # interleaved within each run
            for limit_arg, pending, grpc_options in itertools.product(args.limits, args.pending, args.options):
                limit = None if limit_arg == "none" else int(limit_arg)
                result = _run(calls, limit, pending, grpc_options, args.deadline, args.metadata_bytes)
                last = {
                    "calls": calls,
                    "limit": limit_arg,
                    "pending": pending,
                    "options": grpc_options,
                    "run": run,
                    **result,
                }
                print(json.dumps(last), flush=True)
    codes = last["by_code"]
    cancelled = sum(n for c, n in codes.items() if c in ("CANCELLED", "DEADLINE_EXCEEDED", "UNAVAILABLE"))
    print(
        f"calls {last['calls']} limit {last['limit']} pending {last['pending']} ok {codes.get('OK', 0)} "
        f"refused {codes.get('RESOURCE_EXHAUSTED', 0)} cancelled {cancelled} p99_ms {last['ok_p99_ms']} "
        f"rss_peak_mb {last['rss_peak_mb']}"
    )


if __name__ == "__main__":
    main()
