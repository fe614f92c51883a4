"""What the minute-by-minute diagnoses share (bench/floor_minutes.py, regret_minutes.py, planner_minutes.py): one
backtest case replayed with the planner `kvpilot backtest` builds, no frontier search, every minute kept, and the
helpers of their Markdown tables.

Imported as `import _minutes` by those scripts after their own set-up has put the repository and bench/ on sys.path
(through `minutes_side_by_side` and `planner_variants`, which leave the repository first). It changes sys.path in
no way: a second script's set-up imported from another (regret_minutes importing floor_minutes) put bench/ back
before the repository, where bench/simulator.py stands in for the `simulator` package.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import minutes_side_by_side as msbs
import planner_variants as pv

from kvpilot.commands.backtest import backtest_planner
from scaler.backtest import run as bt
from scaler.backtest.sim import load_trace


def replay(
    case: str, policies: tuple[str, ...], *, adjust: Callable[[Any], Any] | None = None
) -> tuple[bt.BacktestConfig, Any]:
    """``case`` (a bench/planner_variants.py name, or ``<trace>[:k=v,...]``) replayed for ``policies`` with the
    planner `kvpilot backtest` builds from the settings (``adjust``: changed first), every minute with a request
    outside the SLO kept (``worst_minutes`` keeps a few by default); the config and the report."""
    name, kw = pv.case(case)
    base, facts = backtest_planner(None, cold_start=None, slo_ttft=None, max_replicas=None)
    if adjust is not None:
        base = adjust(base)
    every_minute = bt.worst_minutes  # type: ignore[attr-defined]  # run.py's import, patched where it is called
    setattr(bt, "worst_minutes", lambda *a, **k: every_minute(*a, **(k | {"keep": 1_000_000})))  # noqa: B010
    cfg = bt.BacktestConfig(policies=policies, frontier=False, planner=base, **facts, **kw)
    return cfg, bt.backtest(str(pv.TRACES / name), cfg)


def minutes(case: str, cfg: bt.BacktestConfig, result: Any) -> tuple[dict[int, float], dict[int, Any], dict[int, Any]]:
    """Per minute of ``result`` (one policy's replay of ``case``): the arrivals' service need (req/s,
    bench/minutes_side_by_side.py's column), the replicas served (fewest and most ready, most asked), and the
    minute's outside-the-SLO record where it has one."""
    name, kw = pv.case(case)
    trace_kw = {k: v for k, v in kw.items() if k in ("rate_scale", "seed", "start_s", "duration_s")}
    needs = msbs._needs(load_trace(str(pv.TRACES / name), **trace_kw).columns.arrival_s, cfg.slo_ttft_s)
    return needs, msbs._per_minute(result), {int(m.start_s): m for m in result.worst_minutes}


def span(row: Any) -> str:
    """A minute's replicas, "ready / desired" (bench/minutes_side_by_side.py's column)."""
    return msbs._span(row)


def summary(result: Any) -> str:
    """The last line: kvpilot's in-SLO share, replica-hours, requests outside."""
    outside = round(result.requests * (1 - result.slo_attainment))
    share, hours = 100 * result.slo_attainment, result.replica_hours
    return f"kvpilot: {share:.3f} % in SLO, {hours:.4f} replica-h, {outside} outside"


def most(values: list[Any]) -> str:
    """The largest count asked in a minute, – where none was."""
    known = [v for v in values if v is not None]
    return f"{max(known):.0f}" if known else "–"


def value_range(values: list[float], digits: int = 1) -> str:
    """The fewest–most of a minute's finite values, – where none was."""
    known = [v for v in values if math.isfinite(v)]
    return f"{min(known):.{digits}f}–{max(known):.{digits}f}" if known else "–"
