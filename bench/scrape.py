"""Scrape loop benchmark: `kvpilot run` against a real Prometheus over the same 1,000 local targets.

One server process (pinned to core 1) serves 1,000 targets on per-target paths: 900 real vLLM pages (the
captured page in tests/fixtures/metrics, 21 KB) and 100 dcgm-exporter pages (the captured T4 page grown to
the 8 GPUs of a real node). Then, in the same run and pinned to core 0 in turn:

- ours: the real `kvpilot run` process (static targets, SQLite store, its HTTP and gRPC servers up), the
  one loop it runs every 5 s: discover, scrape spread over half the interval, parse, adapt,
  FleetState.observe, detect, decide, persist, publish; for ``--duration`` s;
- peer: Debian's `prometheus` (GOMAXPROCS=1), scrape_interval 5 s, one static_config per target with
  its ``__metrics_path__``, for ``--duration`` s.

Both are measured from outside through /proc after they report ready: CPU seconds (utime + stime), peak
RSS (VmHWM), and scrapes as counted by the server (by User-Agent), so neither measures itself. The last
line is ``ratio: N.NN``, CPU seconds per 1,000 scrapes, ours / Prometheus (goal <= 0.8).

    .venv/bin/python bench/scrape.py                  # 1,000 targets, 60 s each
    .venv/bin/python bench/scrape.py --duration 20    # shorter
    git worktree add /tmp/before HEAD~1 && .venv/bin/python bench/scrape.py --trees /tmp/before . --rounds 5
                                                      # A/B: kvpilot alone, the code before and after alternating
    nice .venv/bin/python bench/scrape.py --soak --duration 3600   # kvpilot alone for an hour: RSS every minute,
                                                      # final/peak vs 300 MB, slope over the last 20 min
    nice .venv/bin/python bench/scrape.py --side-by-side --warmup 3600 --duration 60
                                                      # both at once on one core, each with an hour of history,
                                                      # measured over the same minute; kvpilot's RSS vs 300 MB
    .venv/bin/python bench/scrape.py --side-by-side --warmup 3600 --lock /tmp/measure.lock
                                                      # the same, the lock (flock) held over the measured minute only

With --side-by-side it also prints each one's user and system CPU seconds in the window (the kernel's share).

Instructions retired, which the machine's load does not move as it moves CPU seconds (+-30 % on a shared VM): where
``perf stat -e instructions`` counts, each side's process tree is counted over the same window and the line
``instructions retired per 1,000 scrapes ... instructions ratio: N.NN`` printed before the CPU ratio (never instead of
it); where it cannot (a VM without a PMU: "PMU not available due to virtualization" in dmesg), the line says why.
There, the proxy is callgrind's count (bench/_callgrind.py; user space only, ~50x slower while counting):

    nice .venv/bin/python bench/scrape.py --callgrind --warmup 300 --duration 20
                                                      # kvpilot's loop on a virtual clock (60 ticks of history, 4
                                                      # counted) and Prometheus under callgrind at the same time,
                                                      # every 60 s (it falls behind at 5 s), counted over 3 windows
                                                      # of 180 s one after the other: the median window's count
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._process import tree as process_tree  # noqa: E402
from bench._process import tree_cpu_s  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "metrics"
VLLM_PAGE = FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt"
DCGM_PAGE = FIXTURES / "dcgm__DataDog__integrations-core__metrics.txt"
GPUS_PER_NODE = 8


# -- pages ------------------------------------------------------------------------------------------------


def build_pages() -> tuple[bytes, bytes]:
    """The vLLM capture as is; the dcgm capture's GPU 0 (T4, driver 460) repeated for 8 GPUs."""
    vllm = VLLM_PAGE.read_bytes()
    meta: list[str] = []
    gpu0: list[str] = []
    for line in DCGM_PAGE.read_text().splitlines():
        if line.startswith("#"):
            if line not in meta:
                meta.append(line)
        elif 'gpu="0"' in line and 'DCGM_FI_DRIVER_VERSION="460' in line:
            gpu0.append(line)
    out: list[str] = []
    families = {m.split()[2]: m for m in meta if m.startswith("# TYPE")}
    for name, type_line in families.items():
        out.extend(m for m in meta if m.startswith("# HELP " + name + " "))
        out.append(type_line)
        for line in gpu0:
            if line.startswith(name + "{"):
                for i in range(GPUS_PER_NODE):
                    uuid = f"GPU-{i:08x}-0da5-6d26-a36a-e7af1ce2586e"
                    out.append(
                        re.sub(r'UUID="[^"]+"', f'UUID="{uuid}"', line.replace('gpu="0"', f'gpu="{i}"')).replace(
                            'device="nvidia0"', f'device="nvidia{i}"'
                        )
                    )
    return vllm, ("\n".join(out) + "\n").encode()


def target_path(i: int) -> str:
    return f"/t/{i}/metrics"


_SAMPLE_VALUE_RE = re.compile(r"^([^#\n][^\n]*?(?<=[ }]))([^ \n{}\"]+)$", re.MULTILINE)


class MovingPage:
    """A page whose values move scrape after scrape as a serving engine's do (counters, buckets and counts
    grow, sums grow, gauges wobble) while its layout stays: the n-th scrape of a target gets ``render(n)``."""

    def __init__(self, page: bytes) -> None:
        text = page.decode()
        self.pieces: list[str] = []
        self.base: list[float] = []
        self.step: list[tuple[float, float]] = []  # (per scrape, wobble)
        at = 0
        for m in _SAMPLE_VALUE_RE.finditer(text):
            self.pieces.append(text[at : m.start(2)])
            at = m.end(2)
            name = m[1].split("{", 1)[0].strip()
            self.base.append(float(m[2]))
            if name.endswith(("_total", "_count", "_bucket")):
                self.step.append((1.0, 0.0))
            elif name.endswith("_sum"):
                self.step.append((0.37, 0.0))
            else:
                self.step.append((0.0, 0.001))
        self.tail = text[at:]

    def render(self, n: int) -> bytes:
        wobble = n % 7
        values = [repr(b + n * grow + wobble * w) for b, (grow, w) in zip(self.base, self.step, strict=True)]
        return ("".join(piece + value for piece, value in zip(self.pieces, values, strict=True)) + self.tail).encode()


# -- the page server (its own process, core 1) ----------------------------------------------------------------


async def serve(n_targets: int, n_gpu: int) -> None:
    vllm, dcgm = (MovingPage(page) for page in build_pages())
    pages = {target_path(i).encode(): (dcgm if i >= n_targets - n_gpu else vllm) for i in range(n_targets)}
    scrapes: Counter[bytes] = Counter()
    counts: Counter[str] = Counter()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                first, _, rest = request.partition(b"\r\n")
                path = first.split(b" ")[1]
                agent = "prometheus" if b"User-Agent: Prometheus" in rest else "other"
                if path == b"/stats":
                    payload = json.dumps(counts).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
                    continue
                page = pages.get(path)
                if page is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                counts[agent] += 1
                scrapes[agent.encode() + path] += 1
                body = page.render(scrapes[agent.encode() + path])
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n"
                    % len(body)
                )
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=2048)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


# -- ours: `kvpilot run` (its own process, core 0) --------------------------------------------------------------


def free_port() -> int:
    sock = __import__("socket").socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def kvpilot_config(base: str, args: argparse.Namespace, tmp: Path) -> tuple[Path, int]:
    """A `kvpilot run` configuration for the bench's targets; returns it and the HTTP port."""
    n, n_gpu = args.targets, args.gpu_targets
    targets = [
        {
            "url": f"{base}{target_path(i)}",
            "kind": "gpu" if i >= n - n_gpu else "engine",
            "namespace": "bench",
            "deployment": f"d{i % 50}",
            "pod": f"p{i}",
            "node": f"n{i % n_gpu}",
        }
        for i in range(n)
    ]
    http_port = free_port()
    config = {
        "log_level": "WARNING",
        "store": {"database_url": f"sqlite:///{tmp / 'kvpilot.db'}"},
        "api": {"host": "127.0.0.1", "http_port": http_port, "grpc_port": free_port()},
        "collector": {
            "interval_s": args.interval,
            "concurrency": args.concurrency,
            "discovery": {"kind": "static", "static_targets": targets},
        },
    }
    if getattr(args, "event_loop", ""):  # bench/history_profile.py builds its own Namespace, without it
        config["runtime"] = {"event_loop": args.event_loop}
    path = tmp / "kvpilot.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path, http_port


def loop_summary(http_port: int) -> dict[str, Any]:
    """Ticks, overruns and failed scrapes as kvpilot's own /metrics reports them."""
    import httpx

    from collector.exposition import parse

    page = httpx.get(f"http://127.0.0.1:{http_port}/metrics", timeout=10, trust_env=False).text
    families = parse(page)

    def value(family: str, sample: str) -> float:
        fam = families.get(family)
        return sum(s.value for s in fam.samples if s.name == sample) if fam else float("nan")

    ticks = value("kvpilot_loop_tick_seconds", "kvpilot_loop_tick_seconds_count")
    tick_sum = value("kvpilot_loop_tick_seconds", "kvpilot_loop_tick_seconds_sum")
    return {
        "ticks": int(ticks),
        "overruns": int(value("kvpilot_loop_overruns", "kvpilot_loop_overruns_total")),
        "failures": int(value("kvpilot_scrape_failures", "kvpilot_scrape_failures_total")),
        "tick_s_mean": round(tick_sum / ticks, 3) if ticks else float("nan"),
    }


# -- measuring from outside -------------------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """utime + stime of the process and its live children (kvpilot's page reader, when a page is large enough to
    start it; the bench's pages are not: ``tree_size`` says how many processes were counted)."""
    return tree_cpu_s(pid)


@contextlib.contextmanager
def held(path: str, since: float) -> Iterator[None]:
    """``path`` flocked for the block when given (``--lock``): only the measured window waits for and holds it, so a
    long warm-up keeps no other measurement that takes the same lock waiting. Says how long it waited."""
    if not path:
        yield
        return
    with Path(path).open("a") as lock:
        asked = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        print(
            f"{path} taken after {time.monotonic() - asked:.0f} s; the window starts at "
            f"{(time.monotonic() - since) / 60:.1f} min",
            flush=True,
        )
        yield


def perf_cannot_count() -> str:
    """Why ``perf stat -e instructions`` cannot count instructions retired here ("" when it can): no perf, or a
    counter the CPU (a VM's, without a PMU) does not offer."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed"
    run = subprocess.run([perf, "stat", "-x", ",", "-e", "instructions", "--", "true"], capture_output=True, text=True)
    rows = [line for line in run.stderr.splitlines() if ",instructions" in line]
    if run.returncode != 0 or not rows:
        return f"perf stat failed: {run.stderr.strip()[-300:]}"
    value = rows[-1].split(",", 1)[0]
    if not value.isdigit():
        return f"perf stat -e instructions reads {value} on this CPU (a VM without a PMU: see dmesg)"
    return ""


class PerfInstructions:
    """Instructions retired (user and kernel) by the processes ``pids`` and the threads and children they start while
    it counts: ``perf stat -e instructions -p`` attached until ``stop()``."""

    def __init__(self, pids: list[int]) -> None:
        perf = shutil.which("perf") or "perf"
        self.proc = subprocess.Popen(
            [perf, "stat", "-x", ",", "-e", "instructions", "-p", ",".join(str(p) for p in pids)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> float:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        rows = [line.split(",", 1)[0] for line in err.splitlines() if ",instructions" in line]
        return float(rows[-1]) if rows and rows[-1].isdigit() else float("nan")


@contextlib.contextmanager
def perf_window(pids: dict[str, list[int]], count: bool) -> Iterator[dict[str, float]]:
    """With ``count``, instructions of each named process tree over the block (``counts[name]`` after it)."""
    counters = {name: PerfInstructions(p) for name, p in pids.items()} if count else {}
    counts: dict[str, float] = {}
    try:
        yield counts
    finally:
        for name, counter in counters.items():
            counts[name] = counter.stop()


def user_system_s(pid: int) -> tuple[float, float]:
    """(utime, stime) of the process and its live children: Python's work against the kernel's (sockets, epoll,
    page faults), which a sampling profiler of the Python stacks does not see."""
    user = system = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended since
            continue
        user += int(fields[11]) / os.sysconf("SC_CLK_TCK")
        system += int(fields[12]) / os.sysconf("SC_CLK_TCK")
    return user, system


def tree_size(pid: int) -> int:
    """The processes ``cpu_s`` and the memory figures count: the process and its live children."""
    return len(process_tree(pid))


def peak_rss_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of the process plus its live children's."""
    return memory_mb(pid)["VmHWM"]


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM and RssAnon (the heap's part of the RSS) in MB, from /proc/PID/status, summed over the process
    and its live children."""
    out = {"VmRSS": 0.0, "VmHWM": 0.0, "RssAnon": 0.0}
    for p in process_tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:  # ended since
            continue
        for line in lines:
            key = line.split(":", 1)[0]
            if key in out:
                out[key] += int(line.split()[1]) / 1024
    return out


def slope_per_h(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per hour: a leak shows as a positive slope."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0:
        return float("nan")
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t * 3600


def server_counts(base: str) -> Counter[str]:
    import httpx

    return Counter(httpx.get(f"{base}/stats", timeout=10, trust_env=False).json())


def start_ours(
    base: str, args: argparse.Namespace, tmp: Path, tree: Path | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """The real `kvpilot run` on the bench's targets, pinned to ``args.core``, once its /healthz answers."""
    import httpx

    config, http_port = kvpilot_config(base, args, tmp)
    log = (tmp / "kvpilot.log").open("wb")
    kvpilot = [str(Path(sys.executable).with_name("kvpilot"))]
    env = None
    if tree is not None:  # another checkout's code, with this venv's packages (``--trees``)
        kvpilot, env = [sys.executable, "-m", "kvpilot.cli"], {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        ["taskset", "-c", args.core, *kvpilot, "run", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tree,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{http_port}/healthz", timeout=2, trust_env=False).status_code == 200:
                return proc, http_port
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            log.flush()
            tail = (tmp / "kvpilot.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"kvpilot run did not become ready; its log ends:\n{tail}")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def measure_ours(base: str, args: argparse.Namespace, tmp: Path, tree: Path | None = None) -> dict[str, Any]:
    proc, http_port = start_ours(base, args, tmp, tree)
    try:
        time.sleep(args.warmup)
        before = loop_summary(http_port)
        cpu0, n0, t0 = cpu_s(proc.pid), server_counts(base)["other"], time.monotonic()
        with perf_window({"ours": process_tree(proc.pid)}, args.count_instructions) as instructions:
            time.sleep(args.duration)
        cpu1, n1, wall = cpu_s(proc.pid), server_counts(base)["other"], time.monotonic() - t0
        rss, procs = peak_rss_mb(proc.pid), tree_size(proc.pid)
        after = loop_summary(http_port)
    finally:
        stop(proc)
    summary = {k: after[k] - before[k] for k in ("ticks", "overruns", "failures")}
    summary["tick_s_mean"] = after["tick_s_mean"]
    return {
        "cpu_s": cpu1 - cpu0,
        "instructions": instructions.get("ours", float("nan")),
        "scrapes": n1 - n0,
        "wall_s": wall,
        "rss_mb": rss,
        "procs": procs,
        **summary,
    }


def store_rows(db: Path) -> dict[str, int]:
    """Rows per table in the run's SQLite store: the history it kept."""
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def soak(base: str, args: argparse.Namespace, tmp: Path) -> None:
    """`kvpilot run` alone for ``--duration`` s, its memory read from outside every ``--sample-every`` s; then the
    final and peak RSS against the goal, the slope over the last ``--slope-window`` s, and the store it kept."""
    proc, http_port = start_ours(base, args, tmp)
    samples: list[tuple[float, dict[str, float]]] = []
    try:
        time.sleep(args.warmup)
        before = loop_summary(http_port)
        cpu0, n0, t0 = cpu_s(proc.pid), server_counts(base)["other"], time.monotonic()
        print(
            f"{'min':>5} {'VmRSS MB':>9} {'VmHWM MB':>9} {'RssAnon MB':>10} {'scrapes':>8} {'CPU s':>7} load",
            flush=True,
        )
        while True:
            elapsed = time.monotonic() - t0
            if proc.poll() is not None:
                raise RuntimeError(f"kvpilot run exited ({proc.returncode}); see {tmp / 'kvpilot.log'}")
            mem = memory_mb(proc.pid)
            samples.append((elapsed, mem))
            load = Path("/proc/loadavg").read_text().split()[0]
            scrapes, cpu = server_counts(base)["other"] - n0, cpu_s(proc.pid) - cpu0
            print(
                f"{elapsed / 60:>5.1f} {mem['VmRSS']:>9.1f} {mem['VmHWM']:>9.1f} {mem['RssAnon']:>10.1f} "
                f"{scrapes:>8} {cpu:>7.1f} {load}",
                flush=True,
            )
            if elapsed >= args.duration:
                break
            time.sleep(min(args.sample_every, max(0.0, args.duration - elapsed)))
        cpu1, n1, wall = cpu_s(proc.pid), server_counts(base)["other"], time.monotonic() - t0
        after = loop_summary(http_port)
    finally:
        stop(proc)
    scrapes = n1 - n0
    expected = args.targets * wall / args.interval
    print(
        f"kvpilot run: {scrapes} scrapes in {wall:.0f} s (expected {expected:.0f}), "
        f"{(cpu1 - cpu0) / scrapes * 1000 if scrapes else float('nan'):.3f} CPU s per 1,000 scrapes; "
        f"ticks {after['ticks'] - before['ticks']}, overruns {after['overruns'] - before['overruns']}, "
        f"failed scrapes {after['failures'] - before['failures']}, mean tick {after['tick_s_mean']} s"
    )
    db = tmp / "kvpilot.db"
    rows = store_rows(db)
    print(
        f"store: {db.stat().st_size / 2**20:.1f} MB SQLite, rows " + ", ".join(f"{t} {n}" for t, n in rows.items() if n)
    )
    final, peak = samples[-1][1]["VmRSS"], max(m["VmHWM"] for _, m in samples)
    tail_from = wall - args.slope_window
    for key in ("VmRSS", "RssAnon"):
        tail = [(t, m[key]) for t, m in samples if t >= tail_from]
        print(
            f"{key} slope over the last {args.slope_window / 60:g} min ({len(tail)} samples): "
            f"{slope_per_h(tail):+.1f} MB/h; over all {len(samples)} samples: "
            f"{slope_per_h([(t, m[key]) for t, m in samples]):+.1f} MB/h"
        )
    verdict = "met" if peak <= args.rss_goal_mb else "MISSED"
    print(f"rss: final {final:.1f} MB, peak (VmHWM) {peak:.1f} MB; goal <= {args.rss_goal_mb:g} MB {verdict}")


def measure_prometheus(base: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    proc = start_prometheus(base, args, tmp, args.core)
    time.sleep(args.warmup)
    cpu0, n0, t0 = cpu_s(proc.pid), server_counts(base)["prometheus"], time.monotonic()
    with perf_window({"peer": process_tree(proc.pid)}, args.count_instructions) as instructions:
        time.sleep(args.duration)
    cpu1, n1, wall = cpu_s(proc.pid), server_counts(base)["prometheus"], time.monotonic() - t0
    rss = peak_rss_mb(proc.pid)
    stop(proc)
    peer = instructions.get("peer", float("nan"))
    return {"cpu_s": cpu1 - cpu0, "instructions": peer, "scrapes": n1 - n0, "wall_s": wall, "rss_mb": rss}


def start_prometheus(
    base: str,
    args: argparse.Namespace,
    tmp: Path,
    core: str,
    *,
    prefix: list[str] | None = None,
    ready_s: float = 60.0,
    go_preempt: bool = True,
    timeout_s: float = 4.0,
) -> subprocess.Popen[bytes]:
    """Debian's `prometheus` on the bench's targets, pinned to ``core``, once its /-/ready answers. ``prefix`` runs it
    under another program (callgrind, which needs Go's signal-based preemption off: ``go_preempt=False``, and a scrape
    timeout as long as the interval: slowed ~50x, a scrape that times out is one not read to its end)."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise SystemExit("bench/scrape.py: Debian's `prometheus` is not installed (apt-get install prometheus)")
    host = base.split("://", 1)[1]
    config = {
        "global": {"scrape_interval": f"{args.interval:g}s", "scrape_timeout": f"{timeout_s:g}s"},
        "scrape_configs": [
            {
                "job_name": "bench",
                "static_configs": [
                    {"targets": [host], "labels": {"__metrics_path__": target_path(i), "target": str(i)}}
                    for i in range(args.targets)
                ],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    sock = __import__("socket").socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            core,
            *(prefix or []),
            prometheus,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "GOMAXPROCS": "1", **({} if go_preempt else {"GODEBUG": "asyncpreemptoff=1"})},
    )
    import httpx

    deadline = time.monotonic() + ready_s
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=2, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            raise RuntimeError(f"prometheus did not become ready; see {tmp / 'prometheus.log'}")
        time.sleep(0.2)
    return proc


def side_by_side(base: str, args: argparse.Namespace, tmp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """`kvpilot run` and Prometheus at the same time on the one page server: both warm up for ``--warmup`` s (so
    both hold that much history) and are measured over the same ``--duration`` s window. Ours is pinned to
    ``--core``, Prometheus to ``--peer-core`` (default: the same core, so they share it as on one node; each one's
    CPU is still its own utime + stime). During the warm-up, every ``--sample-every`` s: both RSS and the load."""
    ours_proc, http_port = start_ours(base, args, tmp)
    prom_proc: subprocess.Popen[bytes] | None = None
    try:
        prom_proc = start_prometheus(base, args, tmp, args.peer_core or args.core)
        t_ready = time.monotonic()
        print(f"{'min':>5} {'kvpilot VmRSS MB':>17} {'prometheus VmRSS MB':>20} {'kvpilot ticks':>14} load", flush=True)
        while True:
            for name, proc in (("kvpilot run", ours_proc), ("prometheus", prom_proc)):
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) during the warm-up; see {tmp}")
            elapsed = time.monotonic() - t_ready
            load = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"{elapsed / 60:>5.1f} {memory_mb(ours_proc.pid)['VmRSS']:>17.1f} "
                f"{memory_mb(prom_proc.pid)['VmRSS']:>20.1f} {loop_summary(http_port)['ticks']:>14} {load}",
                flush=True,
            )
            if elapsed >= args.warmup:
                break
            time.sleep(min(args.sample_every, max(0.0, args.warmup - elapsed)))
        with held(args.lock, t_ready):  # the measured window only
            before = loop_summary(http_port)
            counts0 = server_counts(base)
            split0 = user_system_s(ours_proc.pid), user_system_s(prom_proc.pid)
            ours0, prom0, t0 = cpu_s(ours_proc.pid), cpu_s(prom_proc.pid), time.monotonic()
            load0 = Path("/proc/loadavg").read_text().strip()
            trees = {"ours": process_tree(ours_proc.pid), "peer": process_tree(prom_proc.pid)}
            with perf_window(trees, args.count_instructions) as instructions:
                time.sleep(args.duration)
            ours1, prom1, wall = cpu_s(ours_proc.pid), cpu_s(prom_proc.pid), time.monotonic() - t0
            split1 = user_system_s(ours_proc.pid), user_system_s(prom_proc.pid)
            procs = tree_size(ours_proc.pid)
            counts1 = server_counts(base)
            load1 = Path("/proc/loadavg").read_text().strip()
            ours_mem, prom_rss = memory_mb(ours_proc.pid), peak_rss_mb(prom_proc.pid)
            after = loop_summary(http_port)
    finally:
        stop(ours_proc)
        if prom_proc is not None:
            stop(prom_proc)
    print(f"load (/proc/loadavg) at the window's start: {load0}; at its end: {load1}")
    for name, (u0, s0), (u1, s1) in zip(("kvpilot", "prometheus"), split0, split1, strict=True):
        print(f"{name} CPU s in the window: user {u1 - u0:.2f}, system {s1 - s0:.2f}")
    summary = {k: after[k] - before[k] for k in ("ticks", "overruns", "failures")}
    summary["tick_s_mean"] = after["tick_s_mean"]
    ours = {
        "cpu_s": ours1 - ours0,
        "instructions": instructions.get("ours", float("nan")),
        "scrapes": counts1["other"] - counts0["other"],
        "wall_s": wall,
        "rss_mb": ours_mem["VmHWM"],
        "rss_now_mb": ours_mem["VmRSS"],
        "procs": procs,
        **summary,
    }
    prom = {
        "cpu_s": prom1 - prom0,
        "instructions": instructions.get("peer", float("nan")),
        "scrapes": counts1["prometheus"] - counts0["prometheus"],
        "wall_s": wall,
    }
    prom["rss_mb"] = prom_rss
    return ours, prom


async def counted_ticks(args: argparse.Namespace) -> None:
    """``--role ticks``, run under callgrind by ``--callgrind``: kvpilot's loop on bench/history_profile.py's harness
    (the real ControlLoop, FleetState, detectors, planner and SQLite store writer on a virtual clock; this bench's
    moving pages read through the real Collector, parse and adapt, no sockets), ``--warmup``/``--interval`` ticks
    uninstrumented, then ``--duration``/``--interval`` ticks counted one by one. Prints ``tick N Ir`` lines."""
    from bench import _callgrind
    from bench.history_profile import harness
    from kvpilot.runtime.service import freeze_startup_heap
    from kvpilot.runtime.sources import build as build_sources
    from kvpilot.runtime.wiring import build_service

    requests = _callgrind.Requests()
    settings, clock, fetcher, collector = harness(args.targets, args.gpu_targets, "kvpilot-bench-ticks-")
    service, _ = build_service(settings, build_sources(settings), clock=clock, collector=collector)
    warm, counted = round(args.warmup / args.interval), max(1, round(args.duration / args.interval))
    out = Path(args.callgrind_out)
    for tick in range(1, warm + counted + 1):
        fetcher.render_next()  # the page server's work: not counted
        if tick == warm + 1:
            requests.start()
        elif tick > warm:
            requests.zero()
        await service.loop.tick()
        await asyncio.to_thread(service.writer.flush)
        if tick == 1:
            freeze_startup_heap()  # as `kvpilot run` does after its first tick
        clock.advance(args.interval)
        if tick > warm:
            requests.dump(f"tick {tick}")
            print(f"tick {tick} {_callgrind.totals(_callgrind.dumps(out)[-1])}", flush=True)
    requests.stop()
    await collector.aclose()


def callgrind_counts(base: str, args: argparse.Namespace, tmp: Path) -> None:
    """``--callgrind``: instructions per 1,000 scrapes counted by callgrind (user space; load does not move them),
    where perf cannot count. Ours: ``counted_ticks`` (kvpilot's loop on a virtual clock after ``--warmup`` s of
    history), in a process of its own. The peer, at the same time: the real Prometheus on this page server under
    callgrind, every ``--callgrind-peer-interval`` s (it runs ~50x slower instrumented: at 5 s it falls behind and
    its scrapes time out), warmed up uninstrumented for two intervals and the warm-up, then counted from outside over
    ``--callgrind-peer-windows`` windows of ``--callgrind-peer-window`` s one after the other; its scrapes as the
    server counts them. Its instructions per scrape move from one window to the next (session 24: 1.86 and 2.72 G
    per 1,000 scrapes in two runs 15 min apart): how far behind its interval it runs, and whether its background work
    (head GC, WAL, Go's GC) falls inside, change with the window; each window is printed and the median one's count
    taken, with the spread beside it."""
    from bench import _callgrind

    lacks = _callgrind.missing()
    if lacks:
        raise SystemExit(f"bench/scrape.py --callgrind: missing {', '.join(lacks)} (Debian: apt-get install valgrind)")
    _callgrind.client_library()  # built once, before both start
    ours_out = tmp / "ours.cg"
    ours_log = tmp / "ours.log"
    ours = subprocess.Popen(
        [
            *_callgrind.command(ours_out),
            sys.executable,
            __file__,
            "--role",
            "ticks",
            f"--callgrind-out={ours_out}",
            f"--targets={args.targets}",
            f"--gpu-targets={args.gpu_targets}",
            f"--warmup={args.warmup}",
            f"--duration={args.duration}",
            f"--interval={args.interval}",
        ],
        stdout=ours_log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    peer_args = argparse.Namespace(**{**vars(args), "interval": args.callgrind_peer_interval})
    peer_out = tmp / "peer.cg"
    prom = start_prometheus(
        base,
        peer_args,
        tmp,
        args.core,
        prefix=_callgrind.command(peer_out),
        ready_s=600,
        go_preempt=False,
        timeout_s=args.callgrind_peer_interval,
    )
    windows: list[tuple[int, int]] = []  # (Ir, scrapes) of each counted window
    try:
        time.sleep(2 * args.callgrind_peer_interval + args.warmup)
        for _ in range(args.callgrind_peer_windows):
            n0 = server_counts(base)["prometheus"]
            peer_ir = _callgrind.count_window(prom.pid, peer_out, args.callgrind_peer_window)
            windows.append((peer_ir, server_counts(base)["prometheus"] - n0))
    finally:
        stop(prom)
    ours.wait()
    ticks = [int(m[1]) for m in re.finditer(r"^tick \d+ (\d+)$", ours_log.read_text(), re.M)]
    if ours.returncode != 0 or not ticks:
        raise RuntimeError(f"the counted ticks failed ({ours.returncode}): {ours_log.read_text()[-3000:]}")
    ours_per_k = statistics.median(ticks) / args.targets * 1000
    per_window, peer_per_k, pooled = peer_instructions(windows)
    counted = [per_k for per_k in per_window if not math.isnan(per_k)]
    print(f"kvpilot: {len(ticks)} ticks of {args.targets} scrapes counted, Ir each: {', '.join(map(str, ticks))}")
    for k, ((ir, n), per_k) in enumerate(zip(windows, per_window, strict=True)):
        print(
            f"prometheus window {k + 1}: {n} scrapes in {args.callgrind_peer_window:g} s counted, every "
            f"{args.callgrind_peer_interval:g} s, Ir {ir}: {per_k / 1e9:.3f} G per 1,000 scrapes"
        )
    print(
        f"instructions per 1,000 scrapes (callgrind, user space): kvpilot {ours_per_k / 1e9:.3f} G (median tick), "
        f"prometheus {peer_per_k / 1e9:.3f} G (median of {len(counted)} windows with scrapes, "
        f"{min(counted) / 1e9:.3f}-{max(counted) / 1e9:.3f}; all windows together {pooled / 1e9:.3f} G, "
        f"ratio {ours_per_k / pooled:.2f})"
    )
    print(f"instructions ratio: {ours_per_k / peer_per_k:.2f}")


def peer_instructions(windows: list[tuple[int, int]]) -> tuple[list[float], float, float]:
    """Prometheus' instructions per 1,000 scrapes from its counted windows' ``(Ir, scrapes)``: each window's (NaN for
    one without a scrape, which it fell behind its interval for), the median of those with scrapes, and all windows
    pooled. A run where no window saw a scrape has no peer figure: said, not a NaN ratio."""
    per_window = [ir / n * 1000 if n else math.nan for ir, n in windows]
    counted = [per_k for per_k in per_window if not math.isnan(per_k)]
    if not counted:
        raise RuntimeError(f"Prometheus scraped nothing in any of its {len(windows)} counted window(s): no ratio")
    scrapes = sum(n for _ir, n in windows)
    return per_window, statistics.median(counted), sum(ir for ir, _n in windows) / scrapes * 1000


def compare_trees(base: str, args: argparse.Namespace) -> None:
    """kvpilot alone, one checkout after the other for ``args.rounds`` rounds (same page server, same conditions):
    between two runs of the same code the bench's ratio moves by up to 25 % on a shared VM, so a change is measured
    against the code before it by alternating them, and compared by medians."""
    per_k: dict[Path, list[float]] = {tree: [] for tree in args.trees}
    for r in range(args.rounds):
        for tree in args.trees:
            load = Path("/proc/loadavg").read_text().split()[0]
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-ab-") as tmp:
                m = measure_ours(base, args, Path(tmp), tree)
            per_k[tree].append(m["cpu_s"] / m["scrapes"] * 1000 if m["scrapes"] else float("nan"))
            print(f"round {r} {tree}: {per_k[tree][-1]:.3f} CPU s/1000 scrapes ({m['scrapes']}), load {load}")
    first = statistics.median(per_k[args.trees[0]])
    for tree, values in per_k.items():
        med = statistics.median(values)
        print(f"median {tree}: {med:.3f} CPU s/1000 scrapes, {med / first:.3f} of {args.trees[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["all", "server", "ticks"], default="all")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--gpu-targets", type=int, default=100)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds for each of ours and Prometheus")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds each runs before it is measured (first scrapes set up)"
    )
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--base", default="")
    parser.add_argument("--concurrency", type=int, default=16, help="our scrapes in flight at once")
    parser.add_argument("--core", default="0", help="the core ours and Prometheus are pinned to")
    parser.add_argument("--server-core", default="1")
    parser.add_argument(
        "--trees",
        nargs="+",
        type=Path,
        help="A/B instead: `kvpilot run` from each of these checkouts in turn (e.g. `git worktree add /tmp/before "
        "HEAD~1`), --rounds times, against the one page server; no Prometheus; medians of CPU s per 1,000 scrapes",
    )
    parser.add_argument("--rounds", type=int, default=3, help="with --trees: alternating rounds")
    parser.add_argument(
        "--soak",
        action="store_true",
        help="instead: `kvpilot run` alone for --duration s (e.g. 3600), VmRSS/VmHWM sampled every --sample-every s, "
        "the final and peak RSS against --rss-goal-mb and the slope over the last --slope-window s",
    )
    parser.add_argument("--sample-every", type=float, default=60.0, help="with --soak: seconds between samples")
    parser.add_argument("--slope-window", type=float, default=1200.0, help="with --soak: seconds the slope is fit over")
    parser.add_argument("--rss-goal-mb", type=float, default=300.0)
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="ours and Prometheus at the same time on the one page server: both warm up for --warmup s and are "
        "measured over the same --duration s window; RSS and load every --sample-every s during the warm-up, "
        "kvpilot's RSS at the end against --rss-goal-mb",
    )
    parser.add_argument("--peer-core", default="", help="with --side-by-side: Prometheus' core (default: --core)")
    parser.add_argument(
        "--lock",
        default="",
        help="with --side-by-side: a file to flock around the measured window only (not the warm-up), so that an "
        "hour's warm-up does not keep other measurements that take the same lock waiting",
    )
    parser.add_argument(
        "--event-loop",
        choices=["auto", "uvloop", "asyncio"],
        default="",
        help="`kvpilot run`'s runtime.event_loop (unset: the setting's default)",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instead: instructions per 1,000 scrapes counted by callgrind (where perf cannot count): kvpilot's loop "
        "on a virtual clock after --warmup s of history, --duration s of ticks counted; Prometheus under callgrind at "
        "the same time (see --callgrind-peer-interval)",
    )
    parser.add_argument(
        "--callgrind-peer-interval", type=float, default=60.0, help="with --callgrind: Prometheus' scrape interval"
    )
    parser.add_argument(
        "--callgrind-peer-window", type=float, default=180.0, help="with --callgrind: seconds of each counted window"
    )
    parser.add_argument(
        "--callgrind-peer-windows",
        type=int,
        default=3,
        help="with --callgrind: Prometheus' windows counted one after the other (the median one's count is taken)",
    )
    parser.add_argument("--callgrind-out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_peer_windows < 1:
        parser.error(f"--callgrind-peer-windows must be at least 1 (got {args.callgrind_peer_windows})")

    if args.role == "ticks":
        asyncio.run(counted_ticks(args))
        return
    if args.role == "server":
        asyncio.run(serve(args.targets, args.gpu_targets))
        return
    args.no_instructions_why = perf_cannot_count()
    args.count_instructions = not args.no_instructions_why

    server = subprocess.Popen(
        [
            "taskset",
            "-c",
            args.server_core,
            sys.executable,
            __file__,
            "--role",
            "server",
            "--targets",
            str(args.targets),
            "--gpu-targets",
            str(args.gpu_targets),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = f"http://127.0.0.1:{server.stdout.readline().split()[1]}"
        vllm, dcgm = build_pages()
        print(
            f"{args.targets} targets ({args.targets - args.gpu_targets} vLLM pages of {len(vllm) / 1024:.1f} KiB, "
            f"{args.gpu_targets} dcgm pages of {len(dcgm) / 1024:.1f} KiB), every {args.interval:g} s, "
            f"{args.duration:g} s each after {args.warmup:g} s of warm-up, pinned to core {args.core}; "
            f"server on core {args.server_core}; values move every scrape; "
            f"kvpilot's event loop: {args.event_loop or 'the default'}"
        )
        if args.trees:
            compare_trees(base, args)
            return
        if args.callgrind:
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-callgrind-") as tmp:
                callgrind_counts(base, args, Path(tmp))
            return
        if args.soak:
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-soak-") as tmp:
                soak(base, args, Path(tmp))
            return
        if args.side_by_side:
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-sbs-") as tmp:
                ours, prom = side_by_side(base, args, Path(tmp))
        else:
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-run-") as tmp:
                ours = measure_ours(base, args, Path(tmp))
            with tempfile.TemporaryDirectory(prefix="kvpilot-bench-prom-") as tmp:
                prom = measure_prometheus(base, args, Path(tmp))
    finally:
        server.terminate()
        server.wait(10)

    expected = args.targets * args.duration / args.interval
    print(f"{'':12} {'scrapes':>8} {'expected':>9} {'CPU s':>7} {'CPU s/1000 scrapes':>19} {'peak RSS MB':>12}")
    for name, m in (("kvpilot", ours), ("prometheus", prom)):
        per_k = m["cpu_s"] / m["scrapes"] * 1000 if m["scrapes"] else float("nan")
        m["per_k"] = per_k
        print(f"{name:12} {m['scrapes']:>8} {expected:>9.0f} {m['cpu_s']:>7.2f} {per_k:>19.3f} {m['rss_mb']:>12.1f}")
    print(
        f"kvpilot run: ticks {ours['ticks']}, overruns {ours['overruns']}, mean tick {ours['tick_s_mean']} s "
        f"(scrapes spread over the first half), failed scrapes {ours['failures']}; CPU and RSS are its process "
        f"tree's: {ours['procs']} process(es) at the window's end"
    )
    if args.side_by_side:
        verdict = "met" if ours["rss_now_mb"] <= args.rss_goal_mb else "MISSED"
        print(
            f"kvpilot rss after {(args.warmup + args.duration) / 60:.1f} min: {ours['rss_now_mb']:.1f} MB "
            f"(peak {ours['rss_mb']:.1f}); goal <= {args.rss_goal_mb:g} MB {verdict}"
        )
    if args.count_instructions:
        per_k_i = {
            name: m["instructions"] / m["scrapes"] * 1000 if m["scrapes"] else float("nan")
            for name, m in (("kvpilot", ours), ("prometheus", prom))
        }
        print(
            f"instructions retired per 1,000 scrapes (perf stat -e instructions, user and kernel, the window): "
            f"kvpilot {per_k_i['kvpilot'] / 1e9:.3f} G, prometheus {per_k_i['prometheus'] / 1e9:.3f} G; "
            f"instructions ratio: {per_k_i['kvpilot'] / per_k_i['prometheus']:.2f}"
        )
    else:
        print(f"instructions: not counted: {args.no_instructions_why}; the load-insensitive proxy: --callgrind")
    print(f"ratio: {ours['per_k'] / prom['per_k']:.2f}")


if __name__ == "__main__":
    main()
