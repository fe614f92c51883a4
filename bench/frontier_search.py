"""The frontier search alone, timed: `kvpilot backtest`'s policies run once per case (their per-tick schedules cached
as the search's seeds), then `measure_frontier` under `time.process_time`, its `frontier`, `frontier_points` and
`frontier_seeds` written as `kvpilot backtest --json` writes them, so two trees' searches compare byte for byte.

    nice .venv/bin/python bench/frontier_search.py A out.json                    # Mooncake x3, 0-600 s
    PYTHONPATH=/path/to/other/tree nice .venv/bin/python bench/frontier_search.py A other.json
    nice .venv/bin/python bench/frontier_search.py E out.json --profile e.prof   # cProfile of the search

Cases: the bound test's slices (A-C, F; every registered policy) and ServeGen day 6 h 12-14 / 12-18 (D, E; the
seven policies of the round 9 cases). Seeds are cached in ``--seeds-dir`` (the policies are not what is timed).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO.parent / "shared" / "traces"
CASES = {  # trace, start, duration, rate scale, fidelity
    "A": ("mooncake_synthetic_trace.jsonl", 0.0, 600.0, 3.0, None),
    "B": ("servegen_m-large_days1-10", 3600.0, 600.0, 1.0, "fluid"),
    "C": ("azure2023_code.csv", 600.0, 600.0, 2.0, None),
    "D": ("servegen_m-large_days1-10", 475200.0, 7200.0, 1.0, "fluid"),
    "E": ("servegen_m-large_days1-10", 475200.0, 21600.0, 1.0, "fluid"),
    "F": ("azure2023_conv.csv", 1320.0, 600.0, 10.0, "fluid"),
}
SEVEN = ("reactive", "hpa-util", "kpa", "wva", "dynamo", "dynamo-sla", "kvpilot")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("out", help="where the search's JSON goes")
    ap.add_argument("--profile", help="write a cProfile of the search here")
    ap.add_argument("--seeds-dir", default="/tmp", help="cache of the policies' schedules per case")
    args = ap.parse_args()
    from scaler.backtest import sim
    from scaler.backtest.policies import POLICIES
    from scaler.backtest.run import (
        PLANNED_UTILISATION,
        BacktestConfig,
        build_context,
        choose_fidelity,
        kvpilot_planner,
        mean_mix,
        measure_frontier,
        run_policy,
        serving_profile,
    )

    name, start, duration, scale, fidelity = CASES[args.case]
    policies = SEVEN if args.case in "DE" else tuple(POLICIES)
    cfg = BacktestConfig(policies=policies, start_s=start, duration_s=duration, rate_scale=scale, fidelity=fidelity)
    trace = sim.load_trace(str(TRACES / name), rate_scale=scale, seed=cfg.seed, start_s=start, duration_s=duration)
    level = choose_fidelity(trace, cfg.fidelity)
    profile = serving_profile()
    ctx = build_context(
        trace, cfg, PLANNED_UTILISATION * profile.requests_per_s(mean_mix(trace)), kvpilot_planner(cfg, profile)
    )
    cache = Path(args.seeds_dir) / f"frontier_seeds_{args.case}.pkl"
    if cache.exists():
        seeds = pickle.loads(cache.read_bytes())
    else:
        seeds = {p: list(run_policy(trace, POLICIES[p](ctx), ctx, cfg, level).desired) for p in policies}
        cache.write_bytes(pickle.dumps(seeds))
    load0 = Path("/proc/loadavg").read_text().split()[0]
    cpu, wall = time.process_time(), time.perf_counter()
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    found = measure_frontier(trace, ctx, cfg, level, None, seeds)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    out = {
        "frontier": found.to_json(),
        "frontier_points": [p.to_json() for p in found.points],
        "frontier_seeds": list(found.seeds),
    }
    Path(args.out).write_text(json.dumps(out, sort_keys=True))
    line = {"case": args.case, "search_cpu_s": round(cpu, 2), "search_wall_s": round(wall, 2), "load": load0}
    print(json.dumps(line))


if __name__ == "__main__":
    # bench/ holds modules named as the packages are (detectors.py): off the path; the repository after
    # PYTHONPATH, so that another tree's search is timed by putting that tree there
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"] + [str(REPO)]
    main()
