"""CPU of a warm start: N deployments x a day of per-minute arrival rates fed through ``Planner.warm`` (default
``auto``), as `kvpilot run` restores its stored roll-ups (session 19, helper H; review G F5).

``noisy``: a diurnal series with Gaussian noise (seed 1); ``burst``: 20 req/s for one hour a day, 0 otherwise.
Prints the total, per deployment-day and per restored minute. Run it in a tree (``PYTHONPATH=<tree>``) to compare.

    .venv/bin/python bench/warm_start_cost.py 20 noisy
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from scaler.planner import Planner, PlannerConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("deployments", type=int)
    ap.add_argument("kind", nargs="?", choices=["noisy", "burst"], default="noisy")
    args = ap.parse_args()
    rng = random.Random(1)
    planner = Planner(PlannerConfig())
    t0 = time.perf_counter()
    for d in range(args.deployments):
        key = f"ns/dep-{d}"
        for m in range(1440):
            base = 5 + 4 * math.sin(2 * math.pi * m / 1440)
            rate = max(0.0, rng.gauss(base, 1.0)) if args.kind == "noisy" else (20.0 if 600 <= m < 660 else 0.0)
            planner.warm(key, m * 60.0 + 30.0, rate)
    dt = time.perf_counter() - t0
    n = args.deployments
    per_day = dt / n
    per_minute_us = per_day / 1440 * 1e6
    print(f"{args.kind} n={n} total {dt:.2f} s, {per_day:.3f} s per deployment-day, {per_minute_us:.0f} us a minute")


if __name__ == "__main__":
    main()
