"""kvpilot's burst floor minute by minute on one backtest case: what the floor asked, what the rest of the planner
asked, the capacity it divided by, and the requests outside the SLO (issue 10).

Replays one case (`bench/planner_variants.py`'s names, or `<trace>[:rate_scale=N,...]`) with the planner
`kvpilot backtest` builds from the settings (environment included: `KVPILOT_SCALER__PLANNER__BURST_FLOOR=false`
turns the floor off; a candidate tree's own copy of this file replays that tree's planner), kvpilot alone, no
frontier search, and prints a Markdown table of every minute:

    need        the arrivals' service need in the minute (bench/minutes_side_by_side.py's column: the least rate at
                which none of a run of 5 s ticks' requests, runs up to 30 s, waits past the TTFT SLO)
    ready       the fewest and most replicas serving during the minute
    desired     the most replicas asked for during the minute
    floor       the most replicas the burst floor asked (`burst_floor_replicas`; – while off or unknown)
    forecast / queue    the most replicas the forecast and the measured arrivals and queue asked
    capacity    the fewest and most requests/s a replica the planner believed (the SLO feedback's cuts included)
    reasons     the decisions' reasons in the minute
    outside     requests arriving in the minute whose first token came after the SLO (or never)

and a last line: in-SLO share, replica-hours, requests outside. Throwaway analysis, not a benchmark with goals:

    .venv/bin/python bench/floor_minutes.py azure2023_code.csv:rate_scale=5.5
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import minutes_side_by_side as msbs  # noqa: E402
import planner_variants as pv  # noqa: E402

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler import planner as pl  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402
from scaler.backtest.sim import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a bench/planner_variants.py case, or <trace file>[:rate_scale=N,start_s=S,...]")
    args = ap.parse_args()
    name, kw = pv.case(args.case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    minutes: dict[int, dict[str, Any]] = {}
    original = pl._DeploymentPlanner.decide

    def decide(self: Any, view: Any, now: float, *a: Any, **k: Any) -> Any:
        d = original(self, view, now, *a, **k)
        empty: dict[str, Any] = {"floor": [], "forecast": [], "queue": [], "cap": [], "why": set()}
        row = minutes.setdefault(int(now // 60) * 60, empty)
        row["floor"].append(d.forecast.get("burst_floor_replicas"))
        row["forecast"].append(d.predictive_replicas)
        row["queue"].append(d.reactive_replicas)
        cap = d.forecast.get("capacity_rps")
        if isinstance(cap, float) and math.isfinite(cap):
            row["cap"].append(cap)
        row["why"].add(d.reason)
        return d

    pl._DeploymentPlanner.decide = decide  # type: ignore[method-assign]
    every_minute = bt.worst_minutes  # type: ignore[attr-defined]  # run.py's import, patched where it is called
    setattr(bt, "worst_minutes", lambda *a, **k: every_minute(*a, **(k | {"keep": 1_000_000})))  # noqa: B010
    cfg = bt.BacktestConfig(policies=("kvpilot",), frontier=False, planner=base, **facts, **kw)
    report = bt.backtest(str(pv.TRACES / name), cfg)
    trace_kw = {k: v for k, v in kw.items() if k in ("rate_scale", "seed", "start_s", "duration_s")}
    needs = msbs._needs(load_trace(str(pv.TRACES / name), **trace_kw).columns.arrival_s, cfg.slo_ttft_s)
    result = report.policies["kvpilot"]
    served = msbs._per_minute(result)
    missed = {int(m.start_s): m for m in result.worst_minutes}
    columns = "minute (s)", "arrived", "need (req/s)", "ready / desired", "floor", "forecast / queue", "capacity"
    print("| " + " | ".join((*columns, "reasons", "outside")) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for minute in sorted(served):
        row, miss = minutes.get(minute), missed.get(minute)
        if row is None:
            continue
        print(
            f"| {minute} | {miss.arrived if miss else ''} | {needs.get(minute, 0.0):.0f} "
            f"| {msbs._span(served[minute])} "
            f"| {_most(row['floor'])} | {_most(row['forecast'])} / {_most(row['queue'])} | {_range(row['cap'])} "
            f"| {', '.join(sorted(row['why']))} | {miss.outside if miss else 0} |"
        )
    outside = round(result.requests * (1 - result.slo_attainment))
    share, hours = 100 * result.slo_attainment, result.replica_hours
    print(f"kvpilot: {share:.3f} % in SLO, {hours:.4f} replica-h, {outside} outside")


def _most(values: list[Any]) -> str:
    known = [v for v in values if v is not None]
    return f"{max(known):.0f}" if known else "–"


def _range(values: list[float]) -> str:
    return f"{min(values):.1f}–{max(values):.1f}" if values else "–"


if __name__ == "__main__":
    main()
