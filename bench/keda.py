"""KEDA external scaler: GetMetrics latency and throughput with 1,000 ScaledObjects polling one kvpilot.

The server runs in its own process (as kvpilot does), built by `scaler.keda.server.build_server`, hosting both
kvpilot's ExternalScaler (1,000 deployments with decisions) and the peer: grpc's own health-check servicer
(grpcio-health-checking), so both answer from the same process, port and server settings. The client shares
one channel among all ScaledObjects, as KEDA's connection pool does for one `scalerAddress`.

Two load shapes, each run alternately for ours and the peer (rounds, medians across rounds):
- paced: every ScaledObject polls once per `--interval` seconds at a random phase (KEDA's default
  pollingInterval is 30 s; 1 s is 30x that). Latency per call, client-side, p50/p99.
- saturated: all ScaledObjects call back to back (1,000 in flight): throughput in calls/s.

Last line: the ratio ours/peer of the paced p99 latency.

``--serve-from process``: the server process hands both services to KEDA's own process as `kvpilot run` does with
``keda.serve_from: process`` (``scaler.keda.process``, over a mirror of its board), so both answer from that one.

``--client native`` (the default): the load comes from ``bench/native/keda_client.cc``, C++ grpc driven by one
thread through one completion queue, built on demand (``bench/_native.py``; g++ and Debian's ``libgrpc++-dev``
``protobuf-compiler-grpc``, which ``make system-deps`` installs) — as KEDA's compiled (Go) client calls, without an
interpreter's per-call cost inside each latency. ``--client python``: the same workload from grpc.aio, 1,000
coroutines in this process. Both print the client's own CPU in the paced phases.

    .venv/bin/python bench/keda.py [--objects 1000] [--interval 1.0] [--seconds 4] [--rounds 3] [--serve-from loop]
        [--client native|python]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import _native
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc

Call = Callable[[int], Awaitable[object]]


@dataclass
class Table:
    """Per row (kvpilot GetMetrics, then grpc Health.Check), one value per round."""

    p50_ms: dict[str, list[float]]
    p99_ms: dict[str, list[float]]
    calls_s: dict[str, list[float]]
    client_cpu: str = ""  # what the client itself cost in the paced phases


def _namespace(i: int) -> str:
    return f"team-{i % 20}"


def _name(i: int) -> str:
    return f"model-{i}"


async def _serve(objects: int, serve_from: str = "loop") -> None:
    """Server process: prints its port, serves until stdin closes."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from collector.clock import WallClock
    from scaler.decision import Decision
    from scaler.keda.process import ChildConfig, KedaProcess
    from scaler.keda.reader import DecisionReader
    from scaler.keda.server import build_server, register_external_scaler
    from scaler.keda.servicer import ExternalScalerServicer, ServicerSettings
    from scaler.publish import DecisionBoard

    board = DecisionBoard()
    for i in range(objects):
        board.publish(Decision(f"{_namespace(i)}/{_name(i)}", time.time(), 3, 3, 4, 1, "predictive", "bench"))
    # no loop decides again here: the staleness limit is off (0), so the decisions stay served for the whole run
    # (they were stamped an hour ahead, which a reader now refuses: a decision from its future means the clock
    # stepped back)
    if serve_from == "process":
        keda = KedaProcess(board, ChildConfig("127.0.0.1:0", ServicerSettings(), 0.0))
        print(await keda.start(), flush=True)
        await keda.synced()
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await keda.stop()
        return
    health_servicer = health.aio.HealthServicer()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server, port = build_server(
        "127.0.0.1:0",
        [
            register_external_scaler(ExternalScalerServicer(DecisionReader(board, WallClock(), 0))),
            lambda s: health_pb2_grpc.add_HealthServicer_to_server(health_servicer, s),
        ],
    )
    await server.start()
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(None)


def _calls(channel: grpc.aio.Channel, objects: int) -> dict[str, Call]:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = pb_grpc.ExternalScalerStub(channel)
    health_stub = health_pb2_grpc.HealthStub(channel)
    requests = [
        pb.GetMetricsRequest(
            scaledObjectRef=pb.ScaledObjectRef(
                name=_name(i), namespace=_namespace(i), scalerMetadata={"scalerAddress": "kvpilot:9090"}
            ),
            metricName="kvpilot-replicas",
        )
        for i in range(objects)
    ]
    check = health_pb2.HealthCheckRequest(service="")
    return {
        "kvpilot GetMetrics": lambda i: stub.GetMetrics(requests[i]),
        "grpc Health.Check": lambda i: health_stub.Check(check),
    }


async def _paced(call: Call, objects: int, interval: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def poller(i: int) -> None:
        await asyncio.sleep(random.uniform(0, interval))
        next_at = time.perf_counter()
        while next_at < deadline:
            start = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - start)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    await asyncio.gather(*(poller(i) for i in range(objects)))
    return latencies


async def _saturated(call: Call, objects: int, seconds: float) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call(i)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(objects)))
    return done / (time.perf_counter() - start)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _client(port: int, args: argparse.Namespace) -> Table:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        calls = _calls(channel, args.objects)
        for call in calls.values():  # warm up: connection, caches
            await asyncio.gather(*(call(i) for i in range(args.objects)))
        table = Table({name: [] for name in calls}, {name: [] for name in calls}, {name: [] for name in calls})
        cpu_s, n = 0.0, 0
        for _ in range(args.rounds):
            for name, call in calls.items():
                cpu0 = time.process_time()
                latencies = await _paced(call, args.objects, args.interval, args.seconds)
                cpu_s += time.process_time() - cpu0
                n += len(latencies)
                table.p50_ms[name].append(_quantile(latencies, 0.50) * 1e3)
                table.p99_ms[name].append(_quantile(latencies, 0.99) * 1e3)
                table.calls_s[name].append(await _saturated(call, args.objects, args.seconds / 2))
    table.client_cpu = _client_cpu(cpu_s, n, args.seconds * args.rounds * len(calls))
    return table


def _client_cpu(cpu_s: float, calls: int, paced_s: float) -> str:
    per_call_us = cpu_s / max(calls, 1) * 1e6
    return f"client CPU in the paced phases: {cpu_s / paced_s:.1%} of one core, {per_call_us:.0f} µs a call"


def _native_client(port: int, args: argparse.Namespace) -> Table:
    rounds = _native.run_rounds(port, args.objects, args.interval, args.seconds, args.rounds)
    if any(rounds.errors.values()):
        raise RuntimeError(f"gRPC errors in the native client's calls: {rounds.errors}")
    cpu = _client_cpu(rounds.paced_cpu_s, rounds.paced_calls, args.seconds * args.rounds * len(rounds.p99_ms))
    return Table(rounds.p50_ms, rounds.p99_ms, rounds.calls_s, cpu)


def _print(table: Table, args: argparse.Namespace) -> None:
    client = {"python": "grpc.aio (Python), 1,000 coroutines", "native": "C++ grpc, one thread, async CQ"}[args.client]
    print(f"{args.objects} ScaledObjects, one channel, paced at 1 poll / {args.interval:g} s each "
          f"({args.objects / args.interval:.0f} calls/s), {args.rounds} rounds; medians across rounds; "
          f"serve_from {args.serve_from}; client {client}")  # fmt: skip
    print(f"{'':22} {'p50 ms':>8} {'p99 ms':>8} {'saturated calls/s':>18}   p99 ms per round")
    for name in table.p99_ms:
        print(
            f"{name:22} {statistics.median(table.p50_ms[name]):8.3f} {statistics.median(table.p99_ms[name]):8.3f} "
            f"{statistics.median(table.calls_s[name]):18.0f}   {' '.join(f'{v:.2f}' for v in table.p99_ms[name])}"
        )
    ours, peer = (statistics.median(table.p99_ms[name]) for name in table.p99_ms)
    if table.client_cpu:
        print(table.client_cpu)
    print(f"ratio ours/peer p99 (paced GetMetrics vs grpc Health.Check): {ours / peer:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls of one ScaledObject")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one paced phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve-from", choices=["loop", "process"], default="loop", help="keda.serve_from")
    parser.add_argument(
        "--client",
        choices=["native", "python"],
        default="native",
        help="the load client: C++ grpc (bench/native, built on demand; as KEDA's compiled Go client) or grpc.aio",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.objects, args.serve_from))
        return
    if args.client == "native":
        try:
            _native.build()
        except _native.NativeUnavailable as e:
            parser.exit(2, f"{e}\n")
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--objects", str(args.objects), "--serve-from", args.serve_from],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        _print(_native_client(port, args) if args.client == "native" else asyncio.run(_client(port, args)), args)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
