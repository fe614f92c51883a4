"""kvpilot on a large fleet through the Prometheus API: tick time, peak memory and API latency during ticks.

For each fleet size, a loopback Prometheus-API server (``tests/services/promapi.py``: series from the simulator's
rendered vLLM and dcgm-exporter pages, values moving every call, deployments of 100 replicas, 1 % of replicas
sick, 0.1 % down) runs in its own process, and ``kvpilot run`` (the real service: loop, store, HTTP API, KEDA
gRPC) reads it with the PromQL source. Meanwhile this process:

- polls kvpilot's ``/metrics`` every 0.5 s: each step of ``kvpilot_loop_tick_seconds_count`` gives that tick's
  exact duration (the step of ``_sum``) and when it ran; overruns from ``kvpilot_loop_overruns_total``
  (``--tick-poll readyz``: ``/readyz`` every 0.5 s, and ``/metrics`` only once its ``last_tick_at`` moved — at
  10,000 replicas ``/metrics`` is 260 KB and ~10 ms of kvpilot's CPU, which Prometheus asks every 15-60 s, not
  twice a second);
- sends ``GET /healthz`` (every tenth ``GET /v1/decisions?limit=10``) every 25 ms and keeps the latency of those
  that overlapped a tick (the API p99 "during ticks");
- a gRPC client, in a process of its own so that this one's polling and parsing do not delay its calls, calls
  KEDA's ``GetMetrics`` for one of the fleet's deployments every 25 ms on one channel to kvpilot's KEDA port, with
  grpc's own ``Health.Check`` (kvpilot serves it) every 50 ms half-way between as the reference; its fixed schedule
  is not the HTTP client's (that one drifts), so the two seldom send together; split during/outside ticks the same
  way (``--no-grpc``: none);
- reads the peak RSS (``VmHWM``) and CPU of kvpilot's process and its answer-reader process, summed.

``--real-prometheus N`` also runs Debian's real Prometheus with kvpilot's recording rules, scraping the simulator's
N replicas, and checks that the recorded series and the ad-hoc query agree and that kvpilot reads them.

  .venv/bin/python bench/fleet_scale.py --replicas 1000 10000 --mode aggregates --ticks 12
  .venv/bin/python bench/fleet_scale.py --replicas 1000 --mode replicas --ticks 5 --interval 30 --no-api-load
  .venv/bin/python bench/fleet_scale.py --replicas 1000 --ticks 5 --interval 30 --no-api-load   # the ratio's peer

Last line: ``replicas N tick_p50_s X cpu_per_tick_s C rss_mb Y api_p99_ms Z grpc_p99_ms G grpc_outside_p99_ms O
health_p99_ms H`` (for the largest size run; ``grpc_p99_ms`` is GetMetrics during ticks, ``health_p99_ms``
Health.Check during ticks; no API figure with ``--no-api-load``). ``--keda-serve-from process``: KEDA's server in its
own process (``keda.serve_from``), whose CPU and RSS count with kvpilot's (a direct child). ``--keda-client native``:
the gRPC probe is ``bench/native/keda_client.cc`` (C++ grpc, built on demand by ``bench/_native.py``) on the same
schedule, as KEDA's compiled client calls, without grpcio's own per-call cost in each latency.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import _native, _schedstat
from bench._process import metric, spawn, tree_cpu_s, tree_hwm_mb, wait_line

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
KVPILOT = str(Path(PY).parent / "kvpilot")
GRPC_PERIOD_S = 0.025  # one GetMetrics per period; one Health.Check every other period, half a period later
GRPC_METHODS = ("GetMetrics", "Health.Check")


@dataclass
class Run:
    replicas: int
    mode: str
    ticks: list[tuple[float, float]] = field(default_factory=list)  # (end wall time, duration)
    api_during: list[float] = field(default_factory=list)  # ms
    api_outside: list[float] = field(default_factory=list)  # ms, requests that overlapped no tick
    decisions_during: list[float] = field(default_factory=list)  # ms, the GET /v1/decisions among api_during
    healthz_during: list[float] = field(default_factory=list)  # ms, the GET /healthz among api_during
    decisions_outside: list[float] = field(default_factory=list)  # ms, the GET /v1/decisions among api_outside
    overruns: float = 0.0
    rss_mb: float = 0.0
    stage_errors: float = 0.0
    answer_bytes: float = 0.0
    rules_in_use: float | None = None
    cpu_s: float = 0.0  # kvpilot's CPU over the measured ticks (API load included)
    api_errors: int = 0
    measured_from: float = float("inf")  # monotonic time the first measured tick was seen (after the warm-up)
    windows: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each measured tick
    grpc_during: dict[str, list[float]] = field(default_factory=dict)  # ms per method, calls that overlapped a tick
    grpc_outside: dict[str, list[float]] = field(default_factory=dict)
    grpc_errors: dict[str, int] = field(default_factory=dict)  # status code name -> count, measured calls only

    def tick_p50(self) -> float:
        return statistics.median(d for _, d in self.ticks) if self.ticks else float("nan")

    def api_p99(self) -> float:
        return _quantile(self.api_during, 0.99)


def _overlaps(sent: float, done: float, windows: list[tuple[float, float]]) -> bool:
    return any(sent < end and done > start for start, end in windows)


def _quantile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def _measure(
    run: Run,
    base: str,
    pid: int,
    ticks: int,
    interval_s: float,
    warmup: int,
    *,
    api_load: bool = True,
    tick_poll: str = "metrics",
) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=30.0, trust_env=False) as client:
        last: tuple[float, float] | None = None
        seen = 0
        requests: list[tuple[float, float, float, str]] = []  # (sent, done, ms, path)
        stop = asyncio.Event()
        cpu0 = [0.0]

        tick_at: list[object] = [None]  # /readyz's last_tick_at as last read (--tick-poll readyz)

        async def poll_ticks() -> None:
            nonlocal last, seen
            while not stop.is_set():
                ready: object = None
                seen_at = time.monotonic()
                try:
                    if tick_poll == "readyz" and last is not None:
                        # kvpilot sets last_tick_at and counts the tick in one step: /metrics only once it moved
                        ready = (await client.get("/readyz")).json().get("last_tick_at")
                        seen_at = time.monotonic()  # a tick's end as seen: before /metrics is asked
                        if ready == tick_at[0]:
                            await asyncio.sleep(0.5)
                            continue
                    text = (await client.get("/metrics")).text
                    if tick_poll != "readyz" or ready is None:
                        seen_at = time.monotonic()
                except (httpx.TransportError, ValueError):  # a kept-alive connection the server closed as we reused it
                    continue
                count = metric(text, "kvpilot_loop_tick_seconds_count")
                total = metric(text, "kvpilot_loop_tick_seconds_sum")
                tick_at[0] = ready  # a tick ended after /readyz was read: its next answer brings one more /metrics
                if count is not None and total is not None:
                    if last is not None and count > last[0]:
                        seen += int(count - last[0])
                        if seen == warmup:
                            cpu0[0] = tree_cpu_s(pid)
                        if seen > warmup:
                            run.measured_from = min(run.measured_from, seen_at)
                            # several ticks between polls (never at these intervals) would average: fine for p50
                            run.ticks.append((seen_at, (total - last[1]) / (count - last[0])))
                    last = (count, total)
                    run.overruns = metric(text, "kvpilot_loop_overruns_total") or 0.0
                    run.answer_bytes = metric(text, "kvpilot_promql_answer_bytes") or 0.0
                    run.rules_in_use = metric(text, "kvpilot_promql_recording_rules_in_use")
                    run.stage_errors = sum(
                        float(v) for v in re.findall(r"^kvpilot_loop_stage_errors_total\{[^}]*\} (\S+)$", text, re.M)
                    )
                if len(run.ticks) >= ticks:
                    stop.set()
                await asyncio.sleep(0.5)

        async def client_load() -> None:
            i = 0
            while api_load and not stop.is_set():
                path = "/v1/decisions?limit=10" if i % 10 == 9 else "/healthz"
                sent = time.monotonic()
                try:
                    r = await client.get(path)
                    failed = r.status_code >= 500
                except httpx.TransportError:
                    failed = True
                done = time.monotonic()
                run.api_errors += failed
                if seen > warmup:
                    requests.append((sent, done, (done - sent) * 1000, path))
                i += 1
                await asyncio.sleep(max(0.0, 0.025 - (done - sent)))

        deadline = (ticks + warmup + 3) * max(interval_s, 1.0) * 4 + 120
        await asyncio.wait_for(asyncio.gather(poll_ticks(), client_load()), deadline)
        windows = [(end - d - 0.55, end) for end, d in run.ticks]  # the poll sees a tick's end up to 0.5 s late
        run.windows = windows
        for sent, done, ms, path in requests:
            during = _overlaps(sent, done, windows)
            (run.api_during if during else run.api_outside).append(ms)
            if during:
                (run.healthz_during if path == "/healthz" else run.decisions_during).append(ms)
            elif path != "/healthz":
                run.decisions_outside.append(ms)
        run.rss_mb = tree_hwm_mb(pid)
        run.cpu_s = tree_cpu_s(pid) - cpu0[0]


def _grpc_client(port: int, namespace: str, name: str, out: Path) -> None:
    """The gRPC client's process: calls on one channel until its stdin closes, then writes ``method sent done code``
    lines (monotonic seconds, system-wide on Linux, so comparable with the tick windows) to ``out``.

    A blocking client on a fixed schedule of its own: nothing else runs here, so a late answer is kvpilot's (or the
    machine's), not this process's."""
    import threading

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from scaler.keda import externalscaler_pb2 as pb
    from scaler.keda import externalscaler_pb2_grpc as pb_grpc

    closed = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    records: list[tuple[str, float, float, str]] = []
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        get_metrics = pb_grpc.ExternalScalerStub(channel).GetMetrics
        check = health_pb2_grpc.HealthStub(channel).Check
        ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata={"scalerAddress": "kvpilot:9090"})
        metrics_request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="kvpilot-replicas")
        health_request = health_pb2.HealthCheckRequest(service="")
        # slots half a period apart: GetMetrics every period, Health.Check every other period between them
        metrics: tuple[str, Callable[[], object]] = ("GetMetrics", lambda: get_metrics(metrics_request, timeout=30))
        health: tuple[str, Callable[[], object]] = ("Health.Check", lambda: check(health_request, timeout=30))
        schedule = [metrics, health, metrics, None]
        gc.collect()
        gc.freeze()
        slot, next_at = 0, time.monotonic()
        while not closed.is_set():
            planned = schedule[slot % len(schedule)]
            slot += 1
            if planned is not None:
                method, call = planned
                sent = time.monotonic()
                try:
                    call()
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                records.append((method, sent, time.monotonic(), code))
            next_at = max(next_at + GRPC_PERIOD_S / 2, time.monotonic())  # behind: skip, never burst
            time.sleep(max(0.0, next_at - time.monotonic()))
    out.write_text("".join(f"{m} {s!r} {d!r} {c}\n" for m, s, d, c in records))


def _split_grpc(run: Run, out: Path, until: float) -> None:
    """The gRPC calls made while the ticks were measured, split during/outside ticks as the HTTP requests are."""
    for method in GRPC_METHODS:
        run.grpc_during[method], run.grpc_outside[method] = [], []
    for line in out.read_text().splitlines():
        method, sent_s, done_s, code = line.split()
        sent, done = float(sent_s), float(done_s)
        if sent < run.measured_from or done > until:
            continue
        if code != "OK":
            run.grpc_errors[code] = run.grpc_errors.get(code, 0) + 1
        ms = (done - sent) * 1000
        (run.grpc_during if _overlaps(sent, done, run.windows) else run.grpc_outside)[method].append(ms)


def run_one(
    replicas: int,
    mode: str,
    ticks: int,
    interval_s: float,
    tmp: Path,
    *,
    rules: bool = True,
    api_load: bool = True,
    grpc_load: bool = True,
    ksm: bool = True,
    keda_serve_from: str = "loop",
    keda_client: str = "python",
    schedstat_s: float = 0.0,
    keep: Path | None = None,
    perf_sched: bool = False,
    tick_poll: str = "metrics",
) -> Run:
    run = Run(replicas, mode)
    fake_log = tmp / f"promapi-{replicas}.log"
    fake_argv = [PY, "-m", "tests.services.promapi", "--replicas", str(replicas)]
    fake = spawn([*fake_argv, *([] if rules else ["--no-rules"])], log=fake_log)
    kv: subprocess.Popen[bytes] | None = None
    client: subprocess.Popen[bytes] | None = None
    sampler: subprocess.Popen[bytes] | None = None
    perf: subprocess.Popen[bytes] | None = None
    try:
        port = int(wait_line(fake_log, r"listening (\d+)", fake, 120).group(1))
        config = {
            "collector": {
                "interval_s": interval_s,
                "timeout_s": min(interval_s * 0.9, 60.0),
                "discovery": {
                    "kind": "promql",
                    "promql_url": f"http://127.0.0.1:{port}",
                    "promql_mode": mode,
                    "promql_max_answer_bytes": 2 * 1024**3,
                    "promql_kube_state_metrics": ksm,
                },
            },
            "api": {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "anonymous_read": True},
            "keda": {"serve_from": keda_serve_from},
        }
        cfg = tmp / f"kvpilot-{replicas}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        kv_log = tmp / f"kvpilot-{replicas}.log"
        env = {"KVPILOT_DATABASE_URL": f"sqlite:///{tmp / f'kv-{replicas}-{mode}.db'}", "KVPILOT_LOG_LEVEL": "INFO"}
        kv = spawn([KVPILOT, "run", "--config", str(cfg)], env=env, log=kv_log)
        http = int(wait_line(kv_log, r"API on http://[^:]+:(\d+)", kv, 120).group(1))
        grpc_out = tmp / f"grpc-{replicas}.txt"
        if api_load and grpc_load:
            keda = int(wait_line(kv_log, r"KEDA external scaler \(gRPC[^)]*\) on [^:]+:(\d+)", kv, 120).group(1))
            # the fleet's first deployment (tests/services/promapi.py names them prod/llm-0, prod/llm-1, ...)
            argv = [PY, __file__, "--grpc-client", str(keda), "--grpc-out", str(grpc_out)]
            if keda_client == "native":  # the same schedule and output from C++ (bench/native/keda_client.cc)
                argv = _native.schedule_argv(keda, GRPC_PERIOD_S, "prod", "llm-0", grpc_out)
            client_log = (tmp / f"grpc-{replicas}.log").open("wb")
            client = subprocess.Popen(
                argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=client_log, stderr=subprocess.STDOUT
            )
        sched_out = tmp / f"schedstat-{replicas}.txt"
        if schedstat_s > 0:
            roots = {"kvpilot": kv.pid, "promapi": fake.pid, "bench": os.getpid()}
            if client is not None:
                roots["client"] = client.pid
            argv = [PY, "-m", "bench._schedstat", str(sched_out), str(schedstat_s)]
            sampler = subprocess.Popen(
                [*argv, *(f"{k}={v}" for k, v in roots.items())], cwd=ROOT, stdin=subprocess.PIPE
            )
            if perf_sched:  # every switch and wake-up on the machine, on the monotonic clock
                perf_argv = ["perf", "record", "-q", "-k", "mono", "-e", "sched:sched_switch", "-e"]
                perf_argv += ["sched:sched_wakeup", "-a", "-o", str(tmp / "perf.data")]
                perf = subprocess.Popen(perf_argv, cwd=ROOT, stdout=subprocess.DEVNULL)
        # This client's own full collections (its heap is the imports' and httpx's) would delay its requests and
        # count as kvpilot's latency: frozen as kvpilot freezes its own after the first tick.
        gc.collect()
        gc.freeze()
        try:
            asyncio.run(
                _measure(
                    run,
                    f"http://127.0.0.1:{http}",
                    kv.pid,
                    ticks,
                    interval_s,
                    2,
                    api_load=api_load,
                    tick_poll=tick_poll,
                )
            )
        except Exception:
            print(f"kvpilot (exit {kv.poll()}) log tail:\n{kv_log.read_text(errors='replace')[-3000:]}", flush=True)
            raise
        until = time.monotonic()
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=120)
        if sampler is not None and sampler.stdin is not None:
            sampler.stdin.close()
            sampler.wait(timeout=60)
        if client is not None and client.stdin is not None:
            client.stdin.close()
            client.wait(timeout=60)
            _split_grpc(run, grpc_out, until)
        if sampler is not None:
            _sched_report(run, sched_out, grpc_out if client is not None else None, until)
        if perf is not None:
            _perf_report(run, tmp / "perf.data", sched_out, grpc_out if client is not None else None, until, perf.pid)
        if keep is not None:  # the raw records, and the tick windows they were split by
            keep.mkdir(parents=True, exist_ok=True)
            for f in (sched_out, grpc_out, kv_log):
                if f.exists():
                    shutil.copy(f, keep / f.name)
            (keep / f"windows-{replicas}.txt").write_text(
                f"{run.measured_from!r} {until!r}\n" + "".join(f"{a!r} {b!r}\n" for a, b in run.windows)
            )
        # SIGTERM: how long the process takes to end (a tick in flight is abandoned, not awaited)
        t0 = time.monotonic()
        kv.send_signal(signal.SIGTERM)
        kv.wait(timeout=60)
        print(f"  sigterm_exit_s {time.monotonic() - t0:.2f}", flush=True)
    finally:
        for p in (perf, sampler, client, kv, fake):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    return run


def _sched_report(run: Run, sched_out: Path, grpc_out: Path | None, until: float) -> None:
    """CPU and run-queue wait per process and thread during ticks and outside (``--schedstat``); then the same in
    the sample intervals that overlapped the slowest 2 % of GetMetrics calls during ticks, against the rest of the
    calls during ticks: what the slow calls waited behind."""
    split = _schedstat.summarize(sched_out, run.windows, run.measured_from, until)
    print("  schedstat: CPU and run-queue wait, ms per wall second, during ticks (in) and outside (out)", flush=True)
    print(_schedstat.table(split), flush=True)
    if grpc_out is None or not grpc_out.exists():
        return
    calls = _tick_calls(run, grpc_out, until)
    if len(calls) < 50:
        return
    cut = len(calls) - max(1, len(calls) // 50)
    slow = [(s, d) for _, s, d in calls[cut:]]
    rest = [(s, d) for _, s, d in calls[:cut]]
    a = _schedstat.summarize(sched_out, slow, run.measured_from, until)
    b = _schedstat.summarize(sched_out, rest, run.measured_from, until)
    print(
        f"  schedstat around GetMetrics during ticks: the slowest {len(slow)} (>= {calls[cut][0] * 1000:.2f} ms) vs "
        f"the other {len(rest)}, ms per wall second of the sample intervals they overlap",
        flush=True,
    )
    roles = sorted({r for r, _ in a.cpu["in"]} - {"machine"})
    for role in [*roles, "machine"]:
        print(
            f"    {role:14s} cpu {a.rate('cpu', 'in', {role}):7.1f} vs {b.rate('cpu', 'in', {role}):7.1f}   "
            f"wait {a.rate('wait', 'in', {role}):7.1f} vs {b.rate('wait', 'in', {role}):7.1f}",
            flush=True,
        )


def _tick_calls(run: Run, grpc_out: Path, until: float) -> list[tuple[float, float, float]]:
    """The measured GetMetrics calls that overlapped a tick, as (seconds, sent, done), fastest first."""
    calls = []
    for line in grpc_out.read_text().splitlines():
        method, sent_s, done_s, _code = line.split()
        sent, done = float(sent_s), float(done_s)
        if method == "GetMetrics" and sent >= run.measured_from and done <= until:
            calls.append((done - sent, sent, done))
    return sorted(c for c in calls if _overlaps(c[1], c[2], run.windows))


def _perf_report(run: Run, data: Path, sched_out: Path, grpc_out: Path | None, until: float, perf_pid: int) -> None:
    """Who ran on the CPUs while the KEDA process's threads (and kvpilot's) waited for one (``--perf-sched``)."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", _schedstat.PERF_FIELDS], capture_output=True, text=True, check=False
    ).stdout
    roles = _schedstat.with_processes(_schedstat.tid_roles(sched_out), _schedstat.processes(script))
    roles[perf_pid] = "perf"
    comms = _schedstat.comms_of(script)
    parsed = _schedstat.events(script)
    for pid, name in comms.items():
        if name.startswith("perf") and pid not in roles:
            roles[pid] = "perf"
    whole = [(run.measured_from, until)]
    print("  perf sched: run-queue waits and who held the CPUs meanwhile (share of CPU time in the waits)", flush=True)
    for targets in ({"keda"}, {"kvpilot"}):
        name = "/".join(sorted(targets))
        for label, spans in (("during ticks", run.windows), ("whole run", whole)):
            waits = _schedstat.attribute(parsed, roles, targets, spans, comms)
            print(_schedstat.waits_table(waits, f"{name} threads, {label}"), flush=True)
    calls = _tick_calls(run, grpc_out, until) if grpc_out is not None and grpc_out.exists() else []
    if calls:
        slow = calls[len(calls) - max(1, len(calls) // 50) :]
        waits = _schedstat.attribute(parsed, roles, {"keda"}, [(s, d) for _, s, d in slow], comms)
        label = f"keda threads, in the {len(slow)} slowest GetMetrics during ticks (>= {slow[0][0] * 1000:.2f} ms)"
        print(_schedstat.waits_table(waits, label), flush=True)


def _report(run: Run, interval_s: float) -> None:
    durations = [d for _, d in run.ticks]
    head = (
        f"  {run.mode:10s} replicas {run.replicas:>6d}: tick p50 {run.tick_p50():.3f} s, max {max(durations):.3f} s "
        f"({len(durations)} ticks at {interval_s:g} s), CPU {run.cpu_s / max(len(durations), 1):.2f} s/tick, "
        f"overruns {run.overruns:g}, peak RSS {run.rss_mb:.0f} MB, "
    )
    tail = (
        f"answers {run.answer_bytes / 1e6:.2f} MB/tick, rules in use {run.rules_in_use}, "
        f"stage errors {run.stage_errors:g}, API errors {run.api_errors}"
    )
    if not run.api_during and not run.api_outside:
        print(f"{head}no API client (--no-api-load), {tail}", flush=True)
        return
    print(
        f"{head}API p50/p99 during ticks {_quantile(run.api_during, 0.5):.1f}/{run.api_p99():.1f} ms "
        f"({len(run.api_during)} requests; outside ticks {_quantile(run.api_outside, 0.5):.1f}/"
        f"{_quantile(run.api_outside, 0.99):.1f} ms, {len(run.api_outside)}; during ticks /healthz p99 "
        f"{_quantile(run.healthz_during, 0.99):.1f} ms, /v1/decisions p50/p99 "
        f"{_quantile(run.decisions_during, 0.5):.1f}/{_quantile(run.decisions_during, 0.99):.1f} ms, outside "
        f"{_quantile(run.decisions_outside, 0.5):.1f}/{_quantile(run.decisions_outside, 0.99):.1f} ms), {tail}",
        flush=True,
    )
    for method in GRPC_METHODS if run.grpc_during or run.grpc_outside else ():
        during, outside = run.grpc_during[method], run.grpc_outside[method]
        print(
            f"    gRPC {method:12s} p50/p99/max during ticks {_quantile(during, 0.5):.2f}/"
            f"{_quantile(during, 0.99):.2f}/{max(during, default=float('nan')):.2f} ms ({len(during)} calls), outside "
            f"{_quantile(outside, 0.5):.2f}/{_quantile(outside, 0.99):.2f} ms ({len(outside)})",
            flush=True,
        )
    if run.grpc_errors:
        print(f"    gRPC errors {run.grpc_errors}", flush=True)


def real_prometheus(replicas: int, tmp: Path) -> None:
    """The recording rules on a real Prometheus scraping the simulator's replicas: recorded and ad-hoc series agree,
    kvpilot's PromQL source reads them, and its deployment view matches scraping the same replicas directly."""
    sys.path.insert(0, str(ROOT))
    from alerts import recording
    from collector.discovery.promql import PromQLSource
    from collector.promql import expressions as ex
    from tests.services.prometheus import run_prometheus

    sim_log = tmp / "simulator.log"
    # the fluid level (per time step) keeps up with a thousand replicas; load spread so that every replica works
    sim_argv = [KVPILOT, "simulate", "--trace", "synthetic", "--replicas", str(replicas), "--serve", "0"]
    sim = spawn([*sim_argv, "--fidelity", "fluid", "--rate-scale", str(replicas / 4), "--loop"], log=sim_log)
    try:
        port = int(wait_line(sim_log, r"serving on http://127\.0\.0\.1:(\d+)", sim, 120).group(1))
        rules = tmp / "kvpilot-recording-rules.yaml"
        rules.write_text(recording.generate()[recording.RULES_PATH])
        scrape = {
            "job_name": "simulator",
            "scrape_interval": "15s",
            "http_sd_configs": [{"url": f"http://127.0.0.1:{port}/sd", "refresh_interval": "30s"}],
            # dcgm-exporter is not a replica: no deployment label for it
            "relabel_configs": [
                {"source_labels": ["kind"], "regex": "dcgm", "target_label": "deployment", "replacement": ""}
            ],
        }
        t0 = time.monotonic()
        with run_prometheus(tmp, scrape_configs=[scrape], rule_files=[rules], evaluation_interval="15s") as prom:
            prom.wait_for(f"count(up{{{ex.TARGET_SELECTOR}}} == 1) >= {replicas}", timeout_s=300)
            prom.wait_for(f"{ex.RECORD_PREFIX}arrival:rate1m", timeout_s=300)
            ready_s = time.monotonic() - t0

            def signals(query: str) -> dict[tuple[str, str | None], float]:
                return {
                    (s["metric"][ex.SIGNAL_LABEL], s["metric"].get("le")): float(s["value"][1])
                    for s in prom.query(query)
                }

            rec, now = signals(ex.rules_query()), signals(ex.adhoc_query(ex.RULE_WINDOW))
            same = [k for k in rec if k in now]
            close = [k for k in same if abs(rec[k] - now[k]) <= 0.15 * max(abs(now[k]), 1e-9) + 1e-9]
            sick = prom.query(ex.sick_replicas(ex.RULE_WINDOW, "", kv_from=0.4, limit=500))
            print(
                f"  real Prometheus 2.42 scraping {replicas} simulator replicas every 15 s (rules answered after "
                f"{ready_s:.0f} s): {len(rec)} recorded series, {len(now)} ad hoc, {len(same)} in both, {len(close)} "
                f"within 15 % (rules lag the ad-hoc query by up to one evaluation); sick replicas selected {len(sick)}",
                flush=True,
            )
            # at the same moment: direct scrapes 15 s apart, kvpilot's PromQL read half-way between them
            direct, via = asyncio.run(_both(f"http://127.0.0.1:{port}", PromQLSource, prom.url))
        for name in ("ready_replicas", "requests_waiting", "requests_running", "kv_usage_mean", "kv_usage_max"):
            print(f"    {name:18s} direct {getattr(direct, name)!s:>22s}   via rules {getattr(via[0], name)!s:>22s}")
        print(
            f"    arrival_rate       direct {direct.arrival_rate!s:>22s}   via rules {via[0].arrival_rate!s:>22s}"
            f"   (rules in use: {via[1]}, replicas read one by one: {via[2]})",
            flush=True,
        )
    finally:
        sim.kill()
        sim.wait()


async def _both(sim_url: str, source_cls: Any, prom_url: str) -> tuple[Any, tuple[Any, bool | None, int]]:
    direct = asyncio.ensure_future(_view_direct(sim_url))
    await asyncio.sleep(7.5)
    via = await _views_via_promql(source_cls, prom_url)
    return await direct, via


async def _views_via_promql(source_cls: Any, url: str) -> tuple[Any, bool | None, int]:
    from collector.state import FleetState

    source = source_cls(url, mode="aggregates", timeout_s=30.0)
    state = FleetState()
    try:
        result = await source.collect_once()
        state.observe(result.replicas, result.gpus, now=time.time(), down_targets=result.down_targets)
        state.observe_deployments(source.last_aggregates, now=time.time())
    finally:
        await source.aclose()
    (view,) = [v for v in state.deployments().values() if v.replica_count]
    return view, source.rules_in_use, len(result.replicas)


async def _view_direct(sim_url: str) -> Any:
    """Scrape every replica directly twice, 15 s apart (rates need two samples), as kvpilot does by default."""
    from collector.clock import WallClock
    from collector.samples import TargetInfo
    from collector.scrape import Collector
    from collector.state import FleetState

    async with httpx.AsyncClient(trust_env=False) as client:
        listed = (await client.get(f"{sim_url}/targets")).json()
    targets = [
        TargetInfo(url=t["url"], namespace=t["namespace"], deployment=t["deployment"], pod=t["pod"], node=t["node"])
        for t in listed
        if t["kind"] == "engine"
    ]
    state = FleetState()
    async with Collector(clock=WallClock()) as collector:
        for i in range(2):
            result = await collector.collect_once(targets)
            state.observe(result.replicas, result.gpus, now=result.timestamp)
            if i == 0:
                await asyncio.sleep(15.0)
    (view,) = state.deployments().values()
    return view


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, nargs="*", default=[1000, 10000])
    p.add_argument("--mode", choices=["aggregates", "replicas"], default="aggregates")
    p.add_argument("--no-rules", action="store_true", help="a Prometheus without kvpilot's rules (ad-hoc queries)")
    p.add_argument("--ticks", type=int, default=12)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--real-prometheus", type=int, default=0, metavar="N")
    p.add_argument(
        "--no-api-load",
        action="store_true",
        help="no API client: CPU per tick is the tick's own (and /metrics polled every 0.5 s), to compare modes",
    )
    p.add_argument(
        "--no-kube-state-metrics",
        action="store_true",
        help="collector.discovery.promql_kube_state_metrics: false (no Deployment series query each tick)",
    )
    p.add_argument("--no-grpc", action="store_true", help="no gRPC client beside the HTTP one")
    p.add_argument(
        "--keda-serve-from",
        choices=["loop", "process"],
        default="loop",
        help="keda.serve_from: the gRPC server in kvpilot's process, or in its own (counted with kvpilot's tree)",
    )
    p.add_argument(
        "--keda-client",
        choices=["python", "native"],
        default="python",
        help="the gRPC probe: grpcio, blocking (Python), or the same schedule from C++ grpc (bench/native)",
    )
    p.add_argument(
        "--schedstat",
        type=float,
        default=0.0,
        metavar="PERIOD_S",
        help="sample every thread's CPU and run-queue wait this often (bench/_schedstat.py) and print where they went",
    )
    p.add_argument(
        "--perf-sched",
        action="store_true",
        help="with --schedstat: perf records every switch and wake-up (root), to say who ran while KEDA waited",
    )
    p.add_argument(
        "--tick-poll",
        choices=["metrics", "readyz"],
        default="metrics",
        help="how ticks are timed: /metrics every 0.5 s (260 KB and ~10 ms of kvpilot's CPU each at 10,000 "
        "replicas), or /readyz every 0.5 s and /metrics only once its last_tick_at moved (~1 a tick)",
    )
    p.add_argument("--keep", type=Path, metavar="DIR", help="copy the raw gRPC and schedstat records here")
    p.add_argument("--grpc-client", type=int, help=argparse.SUPPRESS)  # the gRPC client's own process: the port
    p.add_argument("--grpc-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.grpc_client is not None:
        _grpc_client(args.grpc_client, "prod", "llm-0", args.grpc_out)
        return
    if args.keda_client == "native" and not args.no_grpc and not args.no_api_load:
        try:
            _native.build()
        except _native.NativeUnavailable as e:
            p.exit(2, f"{e}\n")
    last: Run | None = None
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as d:
        tmp = Path(d)
        if args.real_prometheus:
            real_prometheus(args.real_prometheus, tmp)
        for n in args.replicas:
            last = run_one(
                n,
                args.mode,
                args.ticks,
                args.interval,
                tmp,
                rules=not args.no_rules,
                api_load=not args.no_api_load,
                grpc_load=not args.no_grpc,
                ksm=not args.no_kube_state_metrics,
                keda_serve_from=args.keda_serve_from,
                keda_client=args.keda_client,
                schedstat_s=args.schedstat,
                keep=args.keep,
                perf_sched=args.perf_sched,
                tick_poll=args.tick_poll,
            )
            _report(last, args.interval)
    if last is not None:
        cpu = last.cpu_s / max(len(last.ticks), 1)
        tail = f"tick_p50_s {last.tick_p50():.3f} cpu_per_tick_s {cpu:.2f} rss_mb {last.rss_mb:.0f}"
        if last.api_during or last.api_outside:
            tail += f" api_p99_ms {last.api_p99():.1f}"
        if last.grpc_during:
            tail += f" grpc_p99_ms {_quantile(last.grpc_during['GetMetrics'], 0.99):.2f}"
            tail += f" grpc_outside_p99_ms {_quantile(last.grpc_outside['GetMetrics'], 0.99):.2f}"
            tail += f" health_p99_ms {_quantile(last.grpc_during['Health.Check'], 0.99):.2f}"
        print(f"replicas {last.replicas} {tail}")


if __name__ == "__main__":
    main()
