"""`kvpilot backtest --rollout-at` while kvpilot's planner holds its count (as it does while capacity per replica is
unknown): the replay's count is what kvpilot asked for, the planner's plus the rollout stage's surge, and the
planner must start from its own count, so that the surge is added once, not again every tick."""

from __future__ import annotations

import pytest

from scaler.backtest.run import BacktestConfig, backtest
from scaler.policy import Demand, Recommendation, ReplicaPolicy

TRACE = "synthetic:duration_s=240,rate=2,amplitude=0,bursts=0,prompt_mean=30000,output_mean=5"
AT_S = 80.0


def holding(self: ReplicaPolicy, demand: Demand, *, now: float) -> Recommendation:
    return self._hold(demand, now, "no_capacity", "capacity per replica is unknown yet; holding")


def test_a_hold_through_the_rollout_keeps_the_planners_count_plus_the_surge() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ReplicaPolicy, "recommend", holding)
        report = backtest(
            TRACE, BacktestConfig(policies=("kvpilot",), frontier=False, rollout_at_s=AT_S, cold_start_s=40.0)
        )
    r = report.policies["kvpilot"]
    assert r.rollout is not None
    during = [n for t, n in zip(r.times, r.desired, strict=True) if AT_S <= t < r.rollout.end_s]
    # two replicas held, a surge of at most a wave loading and the next (waves of 1) on top: never more than 4
    assert max(during) == 4
    assert r.rollout.end_s < 240.0
    after = [n for t, n in zip(r.times, r.desired, strict=True) if t > r.rollout.end_s + 45.0]
    assert set(after) == {2}  # the surge withdrawn: the planner's own two
