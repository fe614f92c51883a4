"""The frontier as a bound: no policy — peers, kvpilot, anything — lands below it.

Each trace is replayed over a 10-minute slice that holds a rise in demand, with every registered policy, and each
policy's replica-hours must be at least the frontier's at its own attainment. Only the two request-level slices that
fit CI's time run here (the conversation ×5 and ServeGen slices took over 20 minutes each on the shared runner);
bench/backtest.py checks every whole trace and BENCHMARKS.md records where the frontier is beaten (hpa-util on
Azure code ×4 and Mooncake, dynamo-sla on Azure code ×4): the window-by-window search is not yet a true bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scaler.backtest.policies import POLICIES
from scaler.backtest.run import BacktestConfig, backtest

# (trace, start of the slice, rate scale): slices chosen where demand moves, so that policies scale.
SLICES = [
    ("azure2023_code.csv", 600.0, 2.0),
    pytest.param(
        "mooncake_synthetic_trace.jsonl",
        0.0,
        1.0,
        marks=pytest.mark.xfail(
            strict=True,
            reason="known miss (BENCHMARKS.md, Backtest): on this slice kvpilot reaches 99.33 % at 0.514 replica-h, "
            "below the frontier's 0.558 — the window-by-window search is not yet a true bound",
        ),
    ),
]


@pytest.mark.timeout(1200)  # every policy and the frontier search on a 2-core runner
@pytest.mark.parametrize(("name", "start", "scale"), SLICES)
def test_no_policy_lands_below_the_frontier(traces_dir: Path, name: str, start: float, scale: float) -> None:
    cfg = BacktestConfig(policies=tuple(POLICIES), start_s=start, duration_s=600.0, rate_scale=scale)
    report = backtest(str(traces_dir / name), cfg)
    assert report.frontier is not None
    assert report.frontier.points, "the frontier search verified no schedule"
    below: dict[str, tuple[float, float, float | None]] = {}
    for policy, r in report.policies.items():
        bound = report.frontier.replica_hours_at(r.slo_attainment)
        if bound is None:  # the policy reached an attainment no frontier schedule did: beyond the bound
            below[policy] = (round(r.slo_attainment, 4), round(r.replica_hours, 3), None)
        elif r.replica_hours < bound * 0.999:
            below[policy] = (round(r.slo_attainment, 4), round(r.replica_hours, 3), round(bound, 3))
    assert not below, f"{name}: below the frontier (attainment, replica-h, frontier replica-h): {below}"
