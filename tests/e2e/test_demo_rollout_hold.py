"""`kvpilot demo --rollout-at 10`: a rolling update while kvpilot still holds its count (capacity per replica is not
known in the replay's first minute). The count the simulator reports is what kvpilot asked for, its planner's plus
the surge; the planner holds its own, and the surge is added once (it was added again every tick: 2 → 28)."""

from __future__ import annotations

import asyncio

import pytest

from kvpilot.demo.replay import DemoConfig, run_demo

pytestmark = pytest.mark.e2e

EARLY = DemoConfig(speed=0, duration_s=60, replicas=2, rollout_at_s=10)


@pytest.mark.parametrize("wave", [1, 2])
def test_a_rollout_under_a_hold_asks_for_the_base_plus_the_surge_not_more(
    wave: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The planner must hold its count for the whole minute: the burst floor (on by default since 2417015) raises it
    # to 3 at 75 s once capacity is known (the rollout's surge then still added once: 5 = 3 + 2), which is not a hold.
    monkeypatch.setenv("KVPILOT_SCALER__PLANNER__BURST_FLOOR", "false")
    s = asyncio.run(run_demo(DemoConfig(**{**EARLY.__dict__, "rollout_wave": wave}), on_update=lambda *_: None))
    j = s.to_json()
    assert j["decisions"]["predictive"] == 0  # the planner held throughout
    assert j["decisions"]["hold"] > 0
    asked = max(to for _, _, to in s.scale_changes)
    # the two replicas held, and the surge the rollout stage reported on top: a wave loading and the next
    assert asked == 2 + j["rollout"]["peak_surge_replicas"]
    assert asked <= 2 + 2 * wave
    # pods held: those asked for, and a wave's old pods draining (it was 0.37 replica-h for waves of 1: up to 28 pods)
    assert j["replica_hours"] <= (asked + wave) * j["simulated_s"] / 3600
