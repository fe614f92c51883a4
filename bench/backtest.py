"""Backtest every shared trace (and the rate-scaled cases the scaling issue names) under every policy, with the
one planner configuration `kvpilot run` uses by default, and check kvpilot's goals per case:

- frontier ratio ≤ 1.10 (its replica-hours over the frontier's at its own attainment);
- ≥ 50 % fewer requests outside the SLO than `reactive` at no more replica-hours;
- no peer reaches kvpilot's attainment minus 0.1 point at under 95 % of kvpilot's replica-hours;
- forecast MASE at the cold-start horizon < 1 (against last value).

Writes each run's JSON and plot when --out is given. Misses print as MISSED.

    .venv/bin/python bench/backtest.py [--traces DIR] [--out DIR] [--only NAME,...] [--long-duration S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/simulator.py would shadow the simulator package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler.backtest.plot import plot  # noqa: E402
from scaler.backtest.run import BacktestConfig, Report, backtest  # noqa: E402

PEERS = ("reactive", "hpa-util", "kpa", "wva", "dynamo", "dynamo-sla")
POLICIES = (*PEERS, "kvpilot")
# (case name, trace file or folder, rate scale): every shared trace, and the scaled cases of the scaling issue.
CASES = (
    ("azure2023_code", "azure2023_code.csv", 1.0),
    ("azure2023_code x4", "azure2023_code.csv", 4.0),
    ("azure2023_conv", "azure2023_conv.csv", 1.0),
    ("azure2023_conv x10", "azure2023_conv.csv", 10.0),
    ("mooncake_synthetic", "mooncake_synthetic_trace.jsonl", 1.0),
    ("servegen_m-large", "servegen_m-large_days1-10", 1.0),
)


def goals(report: Report) -> list[tuple[str, bool, str]]:
    k, out = report.policies["kvpilot"], []
    n = k.requests
    miss = {name: round((1 - r.slo_attainment) * n) for name, r in report.policies.items()}
    ratio = report.frontier_ratio("kvpilot")
    out.append(("frontier ratio ≤ 1.10", ratio is not None and ratio <= 1.10, f"{ratio}"))
    r = report.policies["reactive"]
    fewer = 1 - miss["kvpilot"] / miss["reactive"] if miss["reactive"] else (0.0 if miss["kvpilot"] else 1.0)
    out.append(
        (
            "vs reactive: ≤ replica-h and ≥ 50 % fewer outside SLO",
            k.replica_hours <= r.replica_hours and fewer >= 0.5,
            f"{k.replica_hours:.2f} vs {r.replica_hours:.2f} replica-h; outside SLO {miss['kvpilot']} vs "
            f"{miss['reactive']} ({100 * fewer:.0f} % fewer)",
        )
    )
    beaten_by = [
        p
        for p in PEERS
        if p in report.policies
        and report.policies[p].slo_attainment >= k.slo_attainment - 0.001
        and report.policies[p].replica_hours < 0.95 * k.replica_hours
    ]
    out.append(("no peer within 0.1 point at < 95 % of the replica-h", not beaten_by, ", ".join(beaten_by) or "none"))
    out.append(("forecast MASE < 1 (last value)", report.mase < 1.0, f"MASE {report.mase:.3f}"))
    return out


def _announce(started: float) -> Callable[[str, float], None]:
    def progress(name: str, done: float) -> None:
        if done >= 1.0:
            print(f"  {name} done at {time.perf_counter() - started:.0f} s", flush=True)

    return progress


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--long-duration", type=float, default=6 * 3600.0, help="replay at most this much of long traces")
    ap.add_argument("--only", help="comma-separated case names to run")
    args = ap.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    planner, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    cfg = BacktestConfig(policies=POLICIES, planner=planner, **facts)
    for name, file, scale in CASES:
        if args.only and name not in args.only.split(","):
            continue
        path = args.traces / file
        started = time.perf_counter()
        run_cfg = replace(cfg, rate_scale=scale, duration_s=args.long_duration if path.is_dir() else None)
        report = backtest(str(path), run_cfg, progress=_announce(started))
        wall = time.perf_counter() - started
        print(
            f"\n{name}: {report.fidelity} level, {report.duration_s / 3600:.2f} h, "
            f"capacity {report.capacity_rps:.3g} req/s/replica, {wall:.0f} s wall"
        )
        print(
            f"{'policy':10s} {'in SLO':>9s} {'outside':>9s} {'p50 s':>8s} {'p99 s':>9s} "
            f"{'replica-h':>10s} {'events':>7s} {'×frontier':>9s}"
        )
        for policy, r in report.policies.items():
            outside = round((1 - r.slo_attainment) * r.requests)
            fr = report.frontier_ratio(policy)
            print(
                f"{policy:10s} {100 * r.slo_attainment:8.2f}% {outside:9d} {r.p50_ttft_s:8.3f} {r.p99_ttft_s:9.3f} "
                f"{r.replica_hours:10.2f} {r.scale_events:7d} {'–' if fr is None else f'{fr:.2f}':>9s}"
            )
        if report.frontier is not None:
            print(
                "frontier: "
                + ", ".join(f"{100 * p.slo_attainment:.2f} % at {p.replica_hours:.2f}" for p in report.frontier.points)
            )
        print(f"forecast ({report.mase_forecaster}) MASE at {report.horizon_s:.0f} s: {report.mase:.3f}")
        for label, ok, detail in goals(report):
            print(f"  [{'met' if ok else 'MISSED'}] {label}: {detail}")
        if args.out:
            slug = name.replace(" ", "_")
            (args.out / f"{slug}.json").write_text(json.dumps(report.to_json(), indent=1))
            plot(report, args.out / f"{slug}.png")


if __name__ == "__main__":
    main()
