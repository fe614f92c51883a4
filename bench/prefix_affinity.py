"""prefix_cache_miss over fixed prefix-affinity replicas with no fault: what it opens where nothing changed routing.

The demo's workload (the Azure conversation trace ×8 with the simulator's synthesized prefixes) replayed over a fixed
number of replicas behind a prefix-affinity router for 3,500 simulated seconds, the collector's FleetState fed at
5 s ticks, the prefix detector and the control loop's hysteresis over it. Every finding opened here is a false one:
the traffic's own swings read as a routing change. docs/detectors.md ("Why the prefix detector looks the way it
does") and BENCHMARKS.md ("Demo") cite it.

    nice .venv/bin/python bench/prefix_affinity.py --replicas 2 3 4 --seeds 0 1 2 3 [--lost-affinity-drop null]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

# Run as `python bench/prefix_affinity.py`, this file's folder comes first on sys.path: put the repository there.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.state import FleetState  # noqa: E402
from detectors.registry import Detection  # noqa: E402
from detectors.thresholds import DEFAULT, Thresholds  # noqa: E402
from kvpilot.commands.detect import samples_from_snapshot  # noqa: E402
from kvpilot.demo.replay import DEFAULT_TRACE, DemoConfig  # noqa: E402
from simulator import PROFILES, Fleet, FleetConfig, load_trace  # noqa: E402

TICK_S = 5.0
DURATION_S = 3500.0


def run(replicas: int, seed: int, thresholds: Thresholds) -> list[tuple[float, str]]:
    """(time, pattern) of every prefix_cache_miss finding opened over ``replicas`` fixed affinity replicas."""
    demo = DemoConfig()
    trace = load_trace(DEFAULT_TRACE, rate_scale=demo.rate_scale, seed=seed, duration_s=3600.0)
    cfg = FleetConfig(
        profile=PROFILES[demo.profile],
        replicas=replicas,
        cold_start_s=demo.cold_start_s,
        routing="prefix_affinity",
        seed=seed,
    )
    fleet = Fleet(cfg, trace)
    state = FleetState()  # the collector's defaults: 60 s rate window, an hour of history
    detection = Detection(thresholds, only=["prefix_cache_miss"])
    opened: list[tuple[float, str]] = []
    t = 0.0
    while t < DURATION_S:
        t += TICK_S
        fleet.advance_to(t)
        reps, gpus, nodes = samples_from_snapshot(fleet.snapshot(), now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        opened += [(t, str(f.evidence.get("pattern"))) for f in detection.tick(state, now=t).opened]
    return opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument(
        "--lost-affinity-drop",
        default=None,
        help="detectors.prefix.lost_affinity_drop: a number or null (default: as set)",
    )
    args = parser.parse_args()
    thresholds = DEFAULT
    if args.lost_affinity_drop is not None:
        drop = None if args.lost_affinity_drop == "null" else float(args.lost_affinity_drop)
        thresholds = dataclasses.replace(DEFAULT, prefix=dataclasses.replace(DEFAULT.prefix, lost_affinity_drop=drop))
    print(f"lost_affinity_drop {thresholds.prefix.lost_affinity_drop}")
    for n in args.replicas:
        for seed in args.seeds:
            started = time.perf_counter()
            opened = run(n, seed, thresholds)
            took = time.perf_counter() - started
            found = ", ".join(f"{t:,.0f} s {pattern}" for t, pattern in opened) or "none"
            print(f"{n} replicas  seed {seed}  opened: {found}  ({took:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
