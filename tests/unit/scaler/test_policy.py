"""The replica calculation: predictive vs reactive, tolerance, stabilisation, steps, clamps, missing data."""

from __future__ import annotations

import pytest

from scaler.policy import Demand, PolicyConfig, ReplicaPolicy, Tolerances


def _demand(**kw: float | int | None) -> Demand:
    base: dict[str, float | int | None] = {
        "current_replicas": 2,
        "ready_replicas": 2,
        "capacity_rps": 1.0,
        "arrival_rate": 1.6,
        "forecast_upper_rate": 1.6,
        "requests_waiting": 0.0,
    }
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


CFG = PolicyConfig(target_utilisation=0.8, scale_down_stabilisation_s=300.0, queue_drain_s=2.0)


@pytest.mark.parametrize(
    ("demand", "desired", "reason"),
    [
        (_demand(forecast_upper_rate=4.0), 5, "predictive"),  # a forecast rise is provisioned now: ceil(4/0.8)
        (_demand(requests_waiting=8.0), 7, "reactive"),  # queue drained in 2 s: ceil((1.6+4)/0.8)
        (_demand(), 2, "within_tolerance"),  # exactly enough: no change
        (_demand(capacity_rps=None), 2, "no_capacity"),  # unknown capacity holds
        (_demand(arrival_rate=None, forecast_upper_rate=None, requests_waiting=None), 2, "no_metrics"),  # blind
        (_demand(current_replicas=0, ready_replicas=0, arrival_rate=0.0, forecast_upper_rate=0.0), 1, "clamped_min"),
    ],
)
def test_single_decision(demand: Demand, desired: int, reason: str) -> None:
    rec = ReplicaPolicy(CFG).recommend(demand, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (desired, reason)
    assert rec.message


def test_unknown_arrival_rate_never_scales_down_on_an_empty_queue() -> None:
    # The first tick after start: the rate window is still filling, the queue is empty.
    cfg = PolicyConfig(scale_down_stabilisation_s=0.0)
    demand = _demand(current_replicas=8, ready_replicas=8, arrival_rate=None, forecast_upper_rate=None)
    rec = ReplicaPolicy(cfg).recommend(demand, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (8, "no_arrival_rate")


def test_warm_pool_is_forecast_need_beyond_current_need() -> None:
    rec = ReplicaPolicy(CFG).recommend(_demand(forecast_upper_rate=4.0), now=0.0)
    assert rec.predictive_replicas == 5
    assert rec.reactive_replicas == 2
    assert rec.warm_pool == 3


def test_scale_down_waits_for_the_stabilisation_window() -> None:
    # After a high recommendation, lower ones are held until it leaves the 300 s window.
    policy = ReplicaPolicy(CFG)
    assert policy.recommend(_demand(current_replicas=2, forecast_upper_rate=8.0), now=0.0).desired_replicas == 10
    low = _demand(current_replicas=10, ready_replicas=10, arrival_rate=0.5, forecast_upper_rate=0.5)
    held = policy.recommend(low, now=200.0)
    assert (held.desired_replicas, held.reason) == (10, "stabilised")
    released = policy.recommend(low, now=301.0)
    assert released.desired_replicas == 1


def test_scale_up_is_immediate_even_inside_the_window() -> None:
    policy = ReplicaPolicy(CFG)
    policy.recommend(_demand(forecast_upper_rate=0.1, arrival_rate=0.1), now=0.0)
    assert policy.recommend(_demand(forecast_upper_rate=8.0), now=1.0).desired_replicas == 10


@pytest.mark.parametrize(
    ("tolerances", "desired_ratio", "changes"),
    [
        (Tolerances(0.1, 0.1), 0.95, False),  # HPA default swallows a 5% drop
        (Tolerances(0.1, 0.1), 1.05, False),  # and a 5% rise
        (Tolerances(0.1, 0.0), 1.05, True),  # zero up-tolerance: every rise acts
        (Tolerances(0.0, 0.1), 0.95, True),  # zero down-tolerance: every drop acts
    ],
)
def test_tolerance_is_asymmetric(tolerances: Tolerances, desired_ratio: float, changes: bool) -> None:
    assert tolerances.is_within(desired_ratio) is not changes


def test_tolerance_band_applies_to_replica_ratio() -> None:
    cfg = PolicyConfig(target_utilisation=1.0, tolerances=Tolerances(0.1, 0.1), scale_down_stabilisation_s=0.0)
    # 20 replicas, need 21: ratio 1.05 is inside the band, so no change.
    rec = ReplicaPolicy(cfg).recommend(
        _demand(current_replicas=20, ready_replicas=20, arrival_rate=21.0, forecast_upper_rate=21.0), now=0.0
    )
    assert (rec.desired_replicas, rec.reason) == (20, "within_tolerance")


def test_replica_without_metrics_never_pushes_a_scale_down() -> None:
    cfg = PolicyConfig(scale_down_stabilisation_s=0.0)
    demand = _demand(current_replicas=6, ready_replicas=6, arrival_rate=0.1, forecast_upper_rate=0.1)
    blind = Demand(
        current_replicas=6,
        ready_replicas=6,
        capacity_rps=1.0,
        arrival_rate=0.1,
        forecast_upper_rate=0.1,
        requests_waiting=0.0,
        replicas_without_metrics=1,
    )
    assert ReplicaPolicy(cfg).recommend(blind, now=0.0).reason == "missing_metrics"
    assert ReplicaPolicy(cfg).recommend(blind, now=0.0).desired_replicas == 6
    assert ReplicaPolicy(cfg).recommend(demand, now=0.0).desired_replicas == 1


@pytest.mark.parametrize(
    ("config", "demand", "desired", "reason"),
    [
        (PolicyConfig(scale_up_max_step=2), _demand(forecast_upper_rate=8.0), 4, "step_limited"),  # +2 at most
        (
            PolicyConfig(scale_down_max_step=1, scale_down_stabilisation_s=0.0),
            _demand(current_replicas=5, ready_replicas=5, arrival_rate=0.1, forecast_upper_rate=0.1),
            4,
            "step_limited",
        ),  # −1 at most
        (PolicyConfig(max_replicas=3), _demand(forecast_upper_rate=8.0), 3, "clamped_max"),  # ceiling wins
        (PolicyConfig(min_replicas=3), _demand(arrival_rate=0.1, forecast_upper_rate=0.1), 3, "clamped_min"),  # floor
    ],
)
def test_limits(config: PolicyConfig, demand: Demand, desired: int, reason: str) -> None:
    rec = ReplicaPolicy(config).recommend(demand, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (desired, reason)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_replicas": -1},  # negative floor
        {"min_replicas": 5, "max_replicas": 2},  # ceiling below floor
        {"target_utilisation": 0.0},  # would divide by zero
        {"queue_drain_s": 0.0},  # would divide by zero
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicyConfig(**kwargs)  # type: ignore[arg-type]
