"""How long `kvpilot run` takes to exit after SIGTERM when its tick is long (issue 17): PromQL ``replicas`` mode at
3,000 replicas from the loopback Prometheus API (``tests/services/promapi.py``), where a tick overruns a 5 s interval.

One fake Prometheus serves every run; each run starts ``nice kvpilot run`` from a source tree (``--tree NAME=PATH``,
put first on PYTHONPATH; several trees are interleaved, the order alternating per pair) and sends SIGTERM at a seeded
random time ``--from``-``--to`` s after start, the same times for every tree. Each run's line gives the seconds from
the signal to the exit and the log's lines about the shutdown.

  .venv/bin/python bench/sigterm.py --tree before=/tmp/base --tree after=. --pairs 6 --seed 1

Last line per tree: ``NAME: t1 t2 ...; median M max X``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench._process import wait_line  # noqa: E402

SHUTDOWN_LINES = re.compile(r"SIGTERM|abandoned|had not ended|never retrieved|kvpilot stopped")


def _config(port: int, mode: str) -> str:
    return (
        "collector:\n  interval_s: 5\n  timeout_s: 4\n  discovery:\n    kind: promql\n"
        f"    promql_url: http://127.0.0.1:{port}\n    promql_mode: {mode}\n    promql_kube_state_metrics: false\n"
        "    promql_max_answer_bytes: 2147483648\n"
        "api:\n  host: 127.0.0.1\n  http_port: 0\n  grpc_port: 0\n  anonymous_read: true\n"
    )


def one_run(tree: Path, port: int, mode: str, after_s: float, tmp: Path, tag: str) -> tuple[float, list[str]]:
    """Start kvpilot from ``tree``, SIGTERM it ``after_s`` after start; seconds from the signal to its exit."""
    config = tmp / f"{tag}.yaml"
    config.write_text(_config(port, mode))
    log = tmp / f"{tag}.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "KVPILOT_DATABASE_URL": f"sqlite:///{tmp / (tag + '.db')}",
        "KVPILOT_LOG_LEVEL": "INFO",
        "XDG_DATA_HOME": str(tmp / "data"),
    }
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["nice", PY, "-m", "kvpilot.cli", "run", "--config", str(config)],
            cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        time.sleep(max(0.0, started + after_s - time.monotonic()))
        if proc.poll() is not None:
            raise SystemExit(f"kvpilot exited before the signal:\n{log.read_text(errors='replace')[-2000:]}")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        took = time.monotonic() - t0
    lines = [line for line in log.read_text(errors="replace").splitlines() if SHUTDOWN_LINES.search(line)]
    return took, lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (repeatable)")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--replicas", type=int, default=3000)
    p.add_argument("--mode", choices=("replicas", "aggregates"), default="replicas")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--from", dest="lo", type=float, default=15.0, help="earliest signal, s after start")
    p.add_argument("--to", dest="hi", type=float, default=20.0, help="latest signal, s after start")
    args = p.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)]
    rng = random.Random(args.seed)
    offsets = [rng.uniform(args.lo, args.hi) for _ in range(args.pairs)]
    tmp = Path(tempfile.mkdtemp(prefix="kvpilot-sigterm-"))
    fake_log = tmp / "promapi.log"
    fake = subprocess.Popen(
        [PY, "-m", "tests.services.promapi", "--replicas", str(args.replicas)],
        cwd=ROOT, stdout=fake_log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        port = int(wait_line(fake_log, r"listening (\d+)", fake, 180).group(1))
        print(f"loadavg at start {Path('/proc/loadavg').read_text().strip()}", flush=True)
        times: dict[str, list[float]] = {name: [] for name, _ in trees}
        for i, after_s in enumerate(offsets):
            for name, tree in trees if i % 2 == 0 else trees[::-1]:
                took, lines = one_run(tree, port, args.mode, after_s, tmp, f"{name}-{i}")
                times[name].append(took)
                print(f"{name} run {i}, SIGTERM {after_s:.1f} s after start: exit {took:.2f} s later", flush=True)
                for line in lines:
                    print(f"    {line[:200]}", flush=True)
        print(f"loadavg at end {Path('/proc/loadavg').read_text().strip()}; logs in {tmp}", flush=True)
        for name, ts in times.items():
            print(f"{name}: {' '.join(f'{t:.2f}' for t in ts)}; median {statistics.median(ts):.2f} max {max(ts):.2f}")
    finally:
        fake.kill()
        fake.wait()


if __name__ == "__main__":
    main()
