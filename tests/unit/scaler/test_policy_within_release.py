"""An order the measured release would undo is no order (`ReplicaPolicy._within_release`): one replica more than the
current count is not ordered where the release, at today's load less its measured fall within a horizon, holds no more
than the current count (docs/scaling.md, "Policy")."""

from __future__ import annotations

import pytest

from scaler.policy import Demand, PolicyConfig, ReplicaPolicy

CFG = PolicyConfig(target_utilisation=0.8, scale_down_stabilisation_s=300.0, queue_drain_s=2.0, burst_floor=True)


def _demand(**kw: float | int | None) -> Demand:
    """One replica of 10 req/s at 0.83 of its capacity: the 0.8 target asks for a second, while the release, at the
    load's measured fall within a horizon (`release_after_fall`), holds one."""
    base: dict[str, float | int | None] = {
        "current_replicas": 1,
        "ready_replicas": 1,
        "capacity_rps": 10.0,
        "arrival_rate": 8.3,
        "forecast_upper_rate": 8.3,
        "forecast_rate": 8.1,
        "requests_waiting": 0.0,
        "release_after_fall": 1,
    }
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


def test_a_load_at_the_boundary_is_not_ordered_a_replica_the_release_would_let_go() -> None:
    # The load's noise at the 1 -> 2 boundary: the target asks at 8.3 req/s and not at 7.7, and the release lets a
    # second replica go whenever the ask falls back (Azure conversation x2.45: two released while still loading).
    policy = ReplicaPolicy(CFG)
    desired = []
    for tick in range(12):
        rate = 8.3 if tick % 3 else 7.7
        rec = policy.recommend(_demand(arrival_rate=rate, forecast_upper_rate=rate), now=5.0 * tick)
        desired.append(rec.desired_replicas)
        if rate == 8.3:
            assert rec.reason == "within_release", rec.message
            assert "not ordering 2" in rec.message
    assert desired == [1] * 12


@pytest.mark.parametrize(
    ("demand", "desired", "reason"),
    [
        (_demand(release_after_fall=2), 2, "predictive"),  # the load and its rise need the second replica: ordered
        (_demand(release_after_fall=None), 2, "predictive"),  # no release measured yet (the demo's opening), or rough
        (_demand(forecast_upper_rate=17.0), 3, "predictive"),  # a step of two the forecast sees coming
        (_demand(forecast_upper_rate=6.0, arrival_rate=6.0, burst_rate=15.0), 2, "burst_floor"),  # a floor's ask
        (_demand(current_replicas=0, ready_replicas=0, release_after_fall=0), 2, "predictive"),  # waking from zero
        # nine replicas: the down tolerance (10 %) keeps a tenth once ordered, so the release cannot undo it
        (_demand(current_replicas=9, ready_replicas=9, arrival_rate=75.0, forecast_upper_rate=75.0), 10, "predictive"),
    ],
)
def test_orders_the_release_would_keep_are_made(demand: Demand, desired: int, reason: str) -> None:
    rec = ReplicaPolicy(CFG).recommend(demand, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (desired, reason)


def test_eight_replicas_at_the_boundary_keep_their_count() -> None:
    # 8 -> 9 is outside the down tolerance (8/9 < 0.9): the release would let the ninth go as the ask fell back.
    rec = ReplicaPolicy(CFG).recommend(
        _demand(current_replicas=8, ready_replicas=8, arrival_rate=66.0, forecast_upper_rate=66.0), now=0.0
    )
    assert (rec.desired_replicas, rec.reason) == (8, "within_release")


def test_a_stuck_replica_sits_on_top_of_the_release() -> None:
    # One of two replicas is stuck: the release counts serving replicas and the stuck one keeps its pod on top, so a
    # third is the release's to undo while one serving replica carries the load and its rise, and is ordered once not.
    kept = ReplicaPolicy(CFG).recommend(_demand(current_replicas=2, ready_replicas=1, stuck_replicas=1), now=0.0)
    assert (kept.desired_replicas, kept.reason) == (2, "within_release")
    ordered = ReplicaPolicy(CFG).recommend(
        _demand(current_replicas=2, ready_replicas=1, stuck_replicas=1, release_after_fall=2), now=0.0
    )
    assert (ordered.desired_replicas, ordered.reason) == (3, "predictive")
