"""What the scale-down window releases (`_DeploymentPlanner._release_replicas`): the load's measured rise within the
window, never fewer than carry today's load with one replica lost, and nothing before a clean SLO window."""

from __future__ import annotations

import pytest

from scaler.planner import Planner, PlannerConfig, _DeploymentPlanner
from scaler.policy import PolicyConfig


def _planner(window_s: float = 10.0) -> _DeploymentPlanner:
    config = PlannerConfig(policy=PolicyConfig(scale_down_stabilisation_s=window_s), slo_target_miss=0.01)
    return Planner(config).planner_for("prod/llm")


def _primed(load_rps: float, capacity_rps: float = 10.0) -> _DeploymentPlanner:
    """A planner whose load stayed flat at ``load_rps`` for 200 ticks, with a clean SLO record since the start."""
    p = _planner()
    p._slo_read_since = 0.0
    for t in range(200):
        p._release_replicas(float(t), load_rps, 0.0, capacity_rps)
    return p


@pytest.mark.parametrize(
    ("load_rps", "expected"),
    [
        (12.0, 3),  # 1.2 replicas at full capacity, no rise: 2 carry it, 3 carry it with one lost
        (20.0, 3),  # exactly 2: the N+1 floor is 3
        (0.0, 0),  # nothing to carry, nothing to lose
    ],
)
def test_one_replica_lost_is_carried(load_rps: float, expected: int) -> None:
    p = _primed(load_rps)
    assert p._release_replicas(200.0, load_rps, 0.0, 10.0) == expected


def test_a_measured_rise_above_the_spare_is_kept() -> None:
    p = _planner()
    p._slo_read_since = 0.0
    for t in range(200):  # a load that rises by 2 replicas within every window
        p._release_replicas(float(t), 10.0 + 20.0 * ((t // 10) % 2), 0.0, 10.0)
    assert p._release_replicas(200.0, 10.0, 0.0, 10.0) == 3  # 1 + its rise of 2: more than 1 + 1 lost


def test_nothing_is_released_before_a_clean_window_or_a_measured_rise() -> None:
    p = _planner()
    assert p._release_replicas(0.0, 12.0, 0.0, 10.0) is None  # no rise measured
    p = _primed(12.0)
    p._last_late_t = 195.0  # a late minute within the window
    assert p._release_replicas(200.0, 12.0, 0.0, 10.0) is None
    assert p._release_replicas(200.0, None, 0.0, 10.0) is None
    assert p._release_replicas(201.0, 12.0, 0.0, None) is None


def test_an_order_is_read_at_the_load_s_measured_fall_within_the_horizon() -> None:
    # 8.5 req/s at 10 a replica, dipping to 6.5 for 50 s of every 100: within the window the load rises by 0.2 of a
    # replica, so the release holds 2 at 0.85; within a horizon it falls by 0.2, and at 0.65 the release holds 1. A
    # second replica ordered at 0.85 would be let go at the next dip, before it serves (`_release_after_fall`).
    p = _planner()
    p._slo_read_since = 0.0
    for t in range(550):  # ends at 8.5
        load_rps = 8.5 if (t // 50) % 2 == 0 else 6.5
        release = p._release_replicas(float(t), load_rps, 0.0, 10.0)
        after_fall = p._release_after_fall(float(t), load_rps, 0.0, 10.0, release)
    assert (release, after_fall) == (2, 1)
    p._rough = True  # peaks the minute's load does not show: every order is made
    assert p._release_after_fall(550.0, 8.5, 0.0, 10.0, p._release_replicas(550.0, 8.5, 0.0, 10.0)) is None
