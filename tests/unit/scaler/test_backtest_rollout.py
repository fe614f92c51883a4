"""`kvpilot backtest --rollout-at`: a rolling update injected into the replay; kvpilot's replay runs the control
loop's rollout stage after its planner and surges at the first drain, a cold start before the new version serves;
TTFT over the rollout window is reported per policy in the table and in `--json`."""

from __future__ import annotations

import pytest

from scaler import rollout_stage
from scaler.backtest.run import BacktestConfig, backtest

# Four minutes of long prompts: two replicas at steady demand, a 40 s cold start, the rollout at 80 s.
TRACE = "synthetic:duration_s=240,rate=2,amplitude=0,bursts=0,prompt_mean=30000,output_mean=5"
COLD_S = 40.0
AT_S = 80.0


# (time, the planner's count, the count published after the rollout stage) at every decision of the replay.
STAGED: list[tuple[float, int, int]] = []


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    apply = rollout_stage.RolloutStage.apply

    def recording(self, state, decisions, now, **kw):  # type: ignore[no-untyped-def]
        out = apply(self, state, decisions, now, **kw)
        STAGED.extend((now, d.desired_replicas, o.desired_replicas) for d, o in zip(decisions, out, strict=True))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rollout_stage.RolloutStage, "apply", recording)
        return backtest(
            TRACE, BacktestConfig(policies=("kvpilot",), frontier=False, rollout_at_s=AT_S, cold_start_s=COLD_S)
        )


def test_kvpilot_surges_at_the_first_drain_before_the_new_version_serves(report) -> None:  # type: ignore[no-untyped-def]
    r = report.policies["kvpilot"]
    before = [n for t, n in zip(r.times, r.replicas, strict=True) if t < AT_S]
    assert before[-1] == 2
    # The first wave drains an old replica at AT_S; its successor serves a cold start later. The surge is asked for
    # within two ticks of the drain: replicas beyond the two the planner wants, plus the wave's own successor.
    early = [n for t, n in zip(r.times, r.replicas, strict=True) if AT_S < t <= AT_S + 10.0]
    assert max(early) >= 4
    # Once every replica serves the new version the surge is withdrawn: what is published is the planner's own
    # count again (which may keep a replica more for the misses the first wave caused: that is the planner's call).
    after = [(planned, published) for t, planned, published in STAGED if t > r.rollout.end_s + 10.0]
    assert after
    assert all(published == planned for planned, published in after)
    assert max(n for t, n in zip(r.times, r.replicas, strict=True) if t > r.rollout.end_s + 10.0) < max(early)


def test_the_rollout_window_is_reported(report) -> None:  # type: ignore[no-untyped-def]
    w = report.policies["kvpilot"].rollout
    assert w.start_s == AT_S
    assert AT_S + COLD_S <= w.end_s < 240.0  # two waves of one, the last ready before the trace ends
    assert w.requests > 0
    assert 0.0 <= w.slo_attainment <= 1.0
    out = report.to_json()["policies"]["kvpilot"]["rollout"]
    assert set(out) == {"start_s", "end_s", "slo_attainment", "p99_ttft_s", "requests"}


def test_a_rollout_needs_the_request_level() -> None:
    with pytest.raises(ValueError, match="request level"):
        BacktestConfig(rollout_at_s=10.0, fidelity="fluid")
    with pytest.raises(ValueError, match="rollout_wave"):
        BacktestConfig(rollout_at_s=10.0, rollout_wave=0)
