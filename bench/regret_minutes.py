"""kvpilot's release regret minute by minute on one backtest case: the floor it held, what the other stages asked,
the capacity and the SLO feedback's multiplier it was read at, and the requests outside the SLO (issue 10).

Replays one case (`bench/planner_variants.py`'s names, or `<trace>[:rate_scale=N,...]`) with the planner
`kvpilot backtest` builds from the settings (a candidate tree's own copy of this file replays that tree's planner),
kvpilot alone, no frontier search, and prints a Markdown table of every minute:

    need        the arrivals' service need in the minute (bench/minutes_side_by_side.py's column)
    ready       the fewest and most replicas serving during the minute, and the most asked for
    regret      the most replicas the release regret held (`ReleaseRegret`'s floor; – while none is held)
    burst       the most replicas the burst floor asked (– while off or unknown)
    forecast / queue    the most replicas the forecast and the measured arrivals and queue asked
    capacity    the fewest and most requests/s a replica the planner believed, and the SLO feedback's multiplier
    outside     requests arriving in the minute whose first token came after the SLO (or never)

then every release the planner recorded and every regret (the tick, the floor, the need in replicas and req/s, the
capacity and multiplier it was judged at), and a last line: in-SLO share, replica-hours, requests outside.
`--off` sets `release_regret_s` to 0 (the regret off). Throwaway analysis, not a benchmark with goals:

    .venv/bin/python bench/regret_minutes.py azure2023_code.csv:rate_scale=4 [--off]
"""

from __future__ import annotations

import argparse
import dataclasses
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
    ap.add_argument("--off", action="store_true", help="the release regret off (release_regret_s = 0)")
    args = ap.parse_args()
    minutes: dict[int, dict[str, Any]] = {}
    events: list[str] = []
    held: dict[str, int | None] = {}
    original_decide, original_floor = pl._DeploymentPlanner.decide, pl._DeploymentPlanner._regret_floor

    def regret_floor(self: Any, now: float, current: int, capacity_rps: float | None) -> int | None:
        regrets, releases = self.regret.regrets, list(self.regret._releases)
        floor = original_floor(self, now, current, capacity_rps)
        if self.regret.regrets != regrets and capacity_rps:
            rate = self.burst.need_since(now - self.queue_time.window_s) or 0.0
            events.append(
                f"t={now:.0f} s: regret, floor {floor}, {current} serving, need {rate / capacity_rps:.2f} replicas "
                f"({rate:.1f} req/s at {capacity_rps:.1f} a replica, multiplier {self.feedback.multiplier:.2f}); "
                f"releases {releases}"
            )
        held[self.key] = floor
        return floor

    def decide(self: Any, view: Any, now: float, *a: Any, **k: Any) -> Any:
        recorded = len(self.regret._releases)
        d = original_decide(self, view, now, *a, **k)
        if len(self.regret._releases) > recorded:
            events.append(f"t={now:.0f} s: release {self.regret._releases[-1][1]} → {self.regret._releases[-1][2]}")
        empty: dict[str, Any] = {"regret": [], "burst": [], "forecast": [], "queue": [], "cap": [], "mult": []}
        row = minutes.setdefault(int(now // 60) * 60, empty)
        row["regret"].append(held.get(self.key))
        row["burst"].append(d.forecast.get("burst_floor_replicas"))
        row["forecast"].append(d.predictive_replicas)
        row["queue"].append(d.reactive_replicas)
        cap = d.forecast.get("capacity_rps")
        if isinstance(cap, float) and math.isfinite(cap):
            row["cap"].append(cap)
        row["mult"].append(d.forecast.get("capacity_multiplier", math.nan))
        return d

    pl._DeploymentPlanner.decide = decide  # type: ignore[method-assign]
    pl._DeploymentPlanner._regret_floor = regret_floor  # type: ignore[method-assign]
    off = (lambda base: dataclasses.replace(base, release_regret_s=0.0)) if args.off else None
    cfg, report = _minutes.replay(args.case, ("kvpilot",), adjust=off)
    result = report.policies["kvpilot"]
    needs, served, missed = _minutes.minutes(args.case, cfg, result)
    most, value_range = _minutes.most, _minutes.value_range
    columns = "minute (s)", "arrived", "need (req/s)", "ready / desired", "regret", "burst", "forecast / queue"
    print("| " + " | ".join((*columns, "capacity (multiplier)", "outside")) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    for minute in sorted(served):
        row, miss = minutes.get(minute), missed.get(minute)
        if row is None:
            continue
        print(
            f"| {minute} | {miss.arrived if miss else ''} | {needs.get(minute, 0.0):.0f} "
            f"| {_minutes.span(served[minute])} | {most(row['regret'])} | {most(row['burst'])} "
            f"| {most(row['forecast'])} / {most(row['queue'])} "
            f"| {value_range(row['cap'])} ({value_range(row['mult'], 2)}) | {miss.outside if miss else 0} |"
        )
    for event in events:
        print(event)
    print(_minutes.summary(result))


if __name__ == "__main__":
    main()
