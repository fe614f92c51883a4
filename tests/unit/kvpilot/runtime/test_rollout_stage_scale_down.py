"""A scale-down during a rollout is no wave: the rollout stage (the real one, on the simulated fleet, from the
replicas alone) keeps the surge at the planner's count plus two waves when the planner lowers its count mid-rollout.

Before 2026-12-06 the replicas-alone tracker read the ready deficit against the most ready replicas within the
detector's 10-minute window, so the replicas a scale-down removed read as a wave in progress as wide as the
scale-down: a planner going 10 -> 4 mid-rollout (waves of 1) had 10, then 14 and 16 published until the rollout
ended; `kvpilot backtest --rollout-at 300` on Azure code x8 published 24 for a planner at 7."""

from __future__ import annotations

import pytest

from scaler.rollout import RolloutTracker, VersionsSeen
from simulator import Fleet, FleetConfig, load_trace, parse_fault
from tests.helpers.rollout_driver import StageDriver

TRACE = "synthetic:duration_s=1500,rate=2,amplitude=0,bursts=0,prompt_mean=300,output_mean=60"


def _published_after_a_scale_down(replicas: int, lowered_to: int, wave: int, at: float) -> tuple[list[int], float]:
    """The counts the stage publishes from the planner's scale-down at ``at`` to the rollout's end (a rollout of
    waves of ``wave`` from 300 s; the planner holds ``replicas``, then ``lowered_to``), and when every replica was new
    and ready."""
    fleet = Fleet(
        FleetConfig(replicas=replicas, cold_start_s=120.0, routing="least_loaded", seed=3), load_trace(TRACE, seed=3)
    )
    driver = StageDriver(replicas)
    counts: list[int] = []
    t = 0.0
    while t < 1490.0:
        t += 5.0
        if t == 300.0:
            fleet.inject(parse_fault({"type": "rollout", "wave_size": wave, "model_name": "next"}))
        if t == at:
            driver.desired = lowered_to
        fleet.advance_to(t)
        snap = fleet.snapshot()
        driver.tick(fleet, snap, t)
        if t >= at:
            counts.append(driver.published[-1][1])
        if t > 300.0 and all(r.model_name == "next" and r.state == "ready" for r in snap.replicas):
            return counts, t
    raise AssertionError(f"the rollout did not finish by {t:.0f} s: published {driver.published}")


@pytest.mark.parametrize(
    ("replicas", "lowered_to", "wave", "at"),
    [
        (10, 4, 1, 600.0),  # waves of 1, the planner drops by 6 halfway (before: 10, then 14 and 16)
        (12, 5, 1, 450.0),  # a drop of 7 as the second wave loads (before: 12, then 17 and 19)
        (10, 4, 2, 600.0),  # waves of 2 (before: 12 where 8 covers two waves)
        (6, 4, 1, 500.0),  # a small drop (before: 8 where 6 covers two waves)
    ],
)
def test_a_planner_scale_down_mid_rollout_is_no_wave(replicas: int, lowered_to: int, wave: int, at: float) -> None:
    counts, done = _published_after_a_scale_down(replicas, lowered_to, wave, at)
    assert max(counts) <= lowered_to + 2 * wave  # the planner's count and at most two waves' surge
    assert counts[-1] == lowered_to  # the surge withdrawn once the rollout is done
    assert done < 1400.0


def _seen(old: int, new: int, peak: int, count: int) -> VersionsSeen:
    return VersionsSeen({"vllm:v1": old, "vllm:v2": new}, "vllm:v2", old + new, peak, "", replicas=count)


def test_replicas_of_a_scale_down_still_scraped_ready_for_a_tick_do_not_raise_the_peak() -> None:
    """The count falls 10 -> 4 while the removed pods still answer their scrape (terminating); a tick later they
    are gone. Neither tick reads a wave wider than the one replica out before the fall."""
    tracker = RolloutTracker()
    status = tracker.update("d", 0.0, cold_start_s=120.0, seen=_seen(5, 4, 10, 10))  # one wave of 1 loading
    assert status is not None
    assert status.wave_size == 1
    for now, ready_old, ready_new in ((5.0, 5, 4), (10.0, 2, 2)):
        status = tracker.update("d", now, cold_start_s=120.0, seen=_seen(ready_old, ready_new, 10, 4))
        assert status is not None
        assert status.wave_size == 1
