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

import _minutes  # noqa: E402

from scaler import planner as pl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a bench/planner_variants.py case, or <trace file>[:rate_scale=N,start_s=S,...]")
    args = ap.parse_args()
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
    cfg, report = _minutes.replay(args.case, ("kvpilot",))
    result = report.policies["kvpilot"]
    needs, served, missed = _minutes.minutes(args.case, cfg, result)
    most, value_range = _minutes.most, _minutes.value_range
    columns = "minute (s)", "arrived", "need (req/s)", "ready / desired", "floor", "forecast / queue", "capacity"
    print("| " + " | ".join((*columns, "reasons", "outside")) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for minute in sorted(served):
        row, miss = minutes.get(minute), missed.get(minute)
        if row is None:
            continue
        print(
            f"| {minute} | {miss.arrived if miss else ''} | {needs.get(minute, 0.0):.0f} "
            f"| {_minutes.span(served[minute])} "
            f"| {most(row['floor'])} | {most(row['forecast'])} / {most(row['queue'])} | {value_range(row['cap'])} "
            f"| {', '.join(sorted(row['why']))} | {miss.outside if miss else 0} |"
        )
    print(_minutes.summary(result))


if __name__ == "__main__":
    main()
