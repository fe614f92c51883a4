"""Backtest every trace in ../shared/traces under every policy, with one kvpilot configuration for all.

Prints one table per trace and a goal check per trace: kvpilot against `reactive` (replica-hours ≤, requests
outside the SLO ≥ 50 % fewer), against every peer (no peer both cheaper and better), against the `oracle`
(replica-hours within 15 % where the SLO attainment is equal within 0.5 points), and the forecast's MASE < 1.
Writes the JSON of each run next to the plots when --out is given.

    .venv/bin/python bench/backtest.py [--traces DIR] [--out DIR] [--cold-start 120] [--slo-ttft 2]
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

from scaler.backtest.plot import plot  # noqa: E402
from scaler.backtest.run import BacktestConfig, Report, backtest  # noqa: E402

POLICIES = ("reactive", "hpa-util", "kpa", "wva", "dynamo", "kvpilot", "oracle")
PEERS = ("reactive", "hpa-util", "kpa", "wva", "dynamo")


def traces(directory: Path) -> list[Path]:
    found = [p for p in sorted(directory.iterdir()) if p.suffix in (".csv", ".jsonl") or p.is_dir()]
    return [p for p in found if not p.name.startswith(".")]


def goals(report: Report) -> list[tuple[str, bool, str]]:
    k, out = report.policies["kvpilot"], []
    n = k.requests
    miss = {name: round((1 - r.slo_attainment) * n) for name, r in report.policies.items()}
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
    dominated_by = [
        p
        for p in PEERS
        if p in report.policies
        and report.policies[p].replica_hours <= k.replica_hours
        and report.policies[p].slo_attainment >= k.slo_attainment
        and (report.policies[p].replica_hours, report.policies[p].slo_attainment) != (k.replica_hours, k.slo_attainment)
    ]
    out.append(("ahead of every peer (none cheaper and better)", not dominated_by, ", ".join(dominated_by) or "none"))
    o = report.policies["oracle"]
    equal = abs(o.slo_attainment - k.slo_attainment) <= 0.005
    within = k.replica_hours <= 1.15 * o.replica_hours
    excess = max(o.replica_hours, 1e-9)
    out.append(
        (
            "within 15 % of oracle replica-h at equal SLO",
            within and (equal or k.slo_attainment > o.slo_attainment),
            f"{k.replica_hours:.2f} vs {o.replica_hours:.2f} replica-h "
            f"({100 * (k.replica_hours / excess - 1):+.0f} %); "
            f"SLO {100 * k.slo_attainment:.2f} vs {100 * o.slo_attainment:.2f} %",
        )
    )
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
    ap.add_argument("--cold-start", type=float, default=120.0)
    ap.add_argument("--slo-ttft", type=float, default=2.0)
    ap.add_argument(
        "--long-duration",
        type=float,
        default=2 * 86400.0,
        help="replay at most this many seconds of traces longer than it (fluid level: ServeGen)",
    )
    ap.add_argument("--only", help="comma-separated trace names to run")
    args = ap.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    cfg = BacktestConfig(cold_start_s=args.cold_start, slo_ttft_s=args.slo_ttft, policies=POLICIES)
    for path in traces(args.traces):
        if args.only and path.name not in args.only.split(","):
            continue
        started = time.perf_counter()
        run_cfg = replace(cfg, duration_s=args.long_duration) if path.is_dir() else cfg
        report = backtest(
            str(path),
            run_cfg,
            progress=_announce(started),
        )
        wall = time.perf_counter() - started
        print(
            f"\n{path.name}: {report.fidelity} level, {report.duration_s / 3600:.2f} h, "
            f"capacity {report.capacity_rps:.3g} req/s/replica, {wall:.0f} s wall"
        )
        print(
            f"{'policy':10s} {'in SLO':>9s} {'outside':>9s} {'p50 s':>8s} {'p99 s':>9s} "
            f"{'replica-h':>10s} {'events':>7s}"
        )
        for name, r in report.policies.items():
            outside = round((1 - r.slo_attainment) * r.requests)
            print(
                f"{name:10s} {100 * r.slo_attainment:8.2f}% {outside:9d} {r.p50_ttft_s:8.3f} {r.p99_ttft_s:9.3f} "
                f"{r.replica_hours:10.2f} {r.scale_events:7d}"
            )
        print(f"forecast ({report.mase_forecaster}) MASE at {report.horizon_s:.0f} s: {report.mase:.3f}")
        for label, ok, detail in goals(report):
            print(f"  [{'met' if ok else 'MISSED'}] {label}: {detail}")
        if args.out:
            (args.out / f"{path.name}.json").write_text(json.dumps(report.to_json(), indent=1))
            plot(report, args.out / f"{path.name}.png")


if __name__ == "__main__":
    main()
