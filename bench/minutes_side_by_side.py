"""kvpilot and reactive minute by minute on one backtest case: where each one's requests fall outside the SLO
(issue 10).

Replays one case (`bench/planner_variants.py`'s names, or `<trace>[:rate_scale=N,...]`) with the planner
`kvpilot backtest` builds from the settings (environment included: `KVPILOT_SCALER__PLANNER__...`), no frontier
search, and prints a Markdown table of every minute where either policy missed a request or the trace's arrivals
needed at least `--need` requests/s:

    need        the arrivals' service need in the minute: over every run of d seconds of 5 s ticks (d <= 30 s) ending
                at a tick, A(d) / (d + S), the least rate at which none of the run's requests waits past the TTFT SLO
                S (what `scaler.burst.BurstPeak` measures live; computed here from the trace itself)
    ready       the fewest and most replicas serving during the minute, per policy
    desired     the most replicas the policy asked for during the minute
    outside     requests arriving in the minute whose first token came after the SLO (or never)
    capacity    the capacity kvpilot believed, requests/s a replica, over the minute's decisions

and a last line per policy: in-SLO share, replica-hours, requests outside. Throwaway analysis, not a benchmark with
goals:

    .venv/bin/python bench/minutes_side_by_side.py azure2023_code.csv:rate_scale=2.5
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import planner_variants as pv  # noqa: E402

from kvpilot.commands.backtest import backtest_planner  # noqa: E402
from scaler import planner as pl  # noqa: E402
from scaler.backtest import run as bt  # noqa: E402
from scaler.backtest.sim import load_trace  # noqa: E402

TICK_S, RUN_S = 5.0, 30.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a bench/planner_variants.py case, or <trace file>[:rate_scale=N,start_s=S,...]")
    ap.add_argument("--need", type=float, default=40.0, help="also list minutes whose need reaches this (req/s)")
    args = ap.parse_args()
    name, kw = pv.case(args.case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    capacity: dict[int, list[float]] = {}
    original = pl._DeploymentPlanner.decide

    def decide(self: Any, view: Any, now: float, *a: Any, **k: Any) -> Any:
        d = original(self, view, now, *a, **k)
        c = d.forecast.get("capacity_rps")
        if isinstance(c, float) and math.isfinite(c):
            capacity.setdefault(int(now // 60) * 60, []).append(c)
        return d

    pl._DeploymentPlanner.decide = decide  # type: ignore[method-assign]
    every_minute = bt.worst_minutes  # type: ignore[attr-defined]  # run.py's import, patched where it is called
    setattr(bt, "worst_minutes", lambda *a, **k: every_minute(*a, **(k | {"keep": 1_000_000})))  # noqa: B010
    cfg = bt.BacktestConfig(policies=("kvpilot", "reactive"), frontier=False, planner=base, **facts, **kw)
    report = bt.backtest(str(pv.TRACES / name), cfg)
    trace_kw = {k: v for k, v in kw.items() if k in ("rate_scale", "seed", "start_s", "duration_s")}
    needs = _needs(load_trace(str(pv.TRACES / name), **trace_kw).columns.arrival_s, cfg.slo_ttft_s)
    rows = {p: _per_minute(r) for p, r in report.policies.items()}
    missed = {p: {int(m.start_s): m for m in r.worst_minutes} for p, r in report.policies.items()}
    print(
        "| minute (s) | arrived | need (req/s) | kvpilot ready / desired | kvpilot outside "
        "| reactive ready / desired | reactive outside | kvpilot capacity (req/s a replica) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for minute in sorted(rows["kvpilot"]):
        k, r = rows["kvpilot"][minute], rows["reactive"].get(minute)
        ko, ro = missed["kvpilot"].get(minute), missed["reactive"].get(minute)
        need = needs.get(minute, 0.0)
        if ko is None and ro is None and need < args.need:
            continue
        arrived = (ko or ro).arrived if (ko or ro) else ""
        c = capacity.get(minute)
        cap = f"{min(c):.1f}–{max(c):.1f}" if c else "–"
        print(
            f"| {minute} | {arrived} | {need:.0f} | {_span(k)} | {ko.outside if ko else 0} | {_span(r)} "
            f"| {ro.outside if ro else 0} | {cap} |"
        )
    for policy, res in report.policies.items():
        outside = round(res.requests * (1 - res.slo_attainment))
        share = 100 * res.slo_attainment
        print(f"{policy}: {share:.3f} % in SLO, {res.replica_hours:.4f} replica-h, {outside} outside")


def _per_minute(r: Any) -> dict[int, tuple[int, int, int]]:
    """(fewest ready, most ready, most desired) per minute of the policy's ticks."""
    out: dict[int, tuple[int, int, int]] = {}
    for t, ready, desired in zip(r.times, r.ready, r.desired, strict=False):
        m = int(t // 60) * 60
        lo, hi, want = out.get(m, (ready, ready, desired))
        out[m] = (min(lo, ready), max(hi, ready), max(want, desired))
    return out


def _span(row: tuple[int, int, int] | None) -> str:
    if row is None:
        return "–"
    lo, hi, want = row
    return f"{lo} / {want}" if lo == hi else f"{lo}–{hi} / {want}"


def _needs(arrivals: Any, slo_s: float) -> dict[int, float]:
    """Per minute, the highest service need of a run of ticks ending within it (`BurstPeak._service_need`)."""
    a = np.asarray(arrivals, dtype=np.float64)
    if len(a) == 0:
        return {}
    counts = np.bincount((a // TICK_S).astype(np.int64))
    out: dict[int, float] = {}
    for i in range(len(counts)):
        arrived, best = 0.0, 0.0
        for k in range(int(RUN_S // TICK_S)):
            if i - k < 0:
                break
            arrived += float(counts[i - k])
            best = max(best, arrived / ((k + 1) * TICK_S + slo_s))
        m = int(i * TICK_S // 60) * 60
        out[m] = max(out.get(m, 0.0), best)
    return out


if __name__ == "__main__":
    main()
