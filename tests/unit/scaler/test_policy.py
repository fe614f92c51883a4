"""The replica calculation: predictive vs reactive, tolerance, stabilisation, steps, clamps, missing data."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.capacity import CapacityConfig
from scaler.planner import planner_config
from scaler.policy import (
    Demand,
    PolicyConfig,
    ReplicaPolicy,
    Tolerances,
    adaptive_replicas,
    lean_replicas,
    release_replicas,
    spare_replicas,
)


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


# The tests of the mechanics (tolerance, stabilisation, limits) read their arithmetic at a fixed utilisation.
CFG = PolicyConfig(target_utilisation=0.8, scale_down_stabilisation_s=300.0, queue_drain_s=2.0, headroom="fixed")


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


def test_forecast_hold_releases_a_forecast_only_need_after_the_hold() -> None:
    # The forecast alone asked for 10 (arrivals and queue needed 2): held for the forecast's hold, not the window.
    policy = ReplicaPolicy(dataclasses.replace(CFG, forecast_hold_s=150.0))
    assert policy.recommend(_demand(current_replicas=2, forecast_upper_rate=8.0), now=0.0).desired_replicas == 10
    low = _demand(current_replicas=10, ready_replicas=10, arrival_rate=0.5, forecast_upper_rate=0.5)
    assert policy.recommend(low, now=100.0).desired_replicas == 10
    released = policy.recommend(low, now=151.0)
    assert (released.desired_replicas, released.reason) == (2, "stabilised")  # what was measured, for the window
    assert policy.recommend(low, now=301.0).desired_replicas == 1


@pytest.mark.parametrize(("hold_upper_rate", "after"), [(None, 10), (1.6, 2)])
def test_a_band_asked_but_not_measured_is_not_held_by_the_window(hold_upper_rate: float | None, after: int) -> None:
    # The forecast's upper bound asked for 10 (8 req/s at 0.8) while its point and the arrivals need 2. Held for the
    # window as today; with `hold_upper_rate` (the planner's point, where the band is no measured share) the window
    # records the need at that rate, so the 10 serve while asked and the next lower ask is not held up to them.
    policy = ReplicaPolicy(CFG)
    ask = _demand(current_replicas=2, forecast_upper_rate=8.0, hold_upper_rate=hold_upper_rate)
    assert policy.recommend(ask, now=0.0).desired_replicas == 10
    kept = _demand(current_replicas=10, ready_replicas=10, forecast_upper_rate=8.0, hold_upper_rate=hold_upper_rate)
    assert policy.recommend(kept, now=5.0).desired_replicas == 10  # still asked: kept
    low = _demand(current_replicas=10, ready_replicas=10, arrival_rate=1.6, forecast_upper_rate=1.6)
    assert policy.recommend(low, now=10.0).desired_replicas == after


def test_forecast_hold_keeps_a_measured_need_for_the_whole_window() -> None:
    # A queue and arrivals that needed 8 are a measured need: the window holds them as the HPA would.
    policy = ReplicaPolicy(dataclasses.replace(CFG, forecast_hold_s=150.0))
    busy = _demand(current_replicas=2, arrival_rate=6.4, forecast_upper_rate=1.0)
    assert policy.recommend(busy, now=0.0).desired_replicas == 8
    low = _demand(current_replicas=8, ready_replicas=8, arrival_rate=0.5, forecast_upper_rate=0.5)
    held = policy.recommend(low, now=200.0)
    assert (held.desired_replicas, held.reason) == (8, "stabilised")
    assert policy.recommend(low, now=301.0).desired_replicas == 1


def test_measured_release_lowers_what_the_window_holds_never_below_the_need() -> None:
    # A measured need of 8 is held for the window, unless the planner measured that fewer carry the load now plus
    # its rise within the window (one replica lost included): then the window holds those, never less than today's
    # need, and a stuck replica keeps its pod on top.
    policy = ReplicaPolicy(dataclasses.replace(CFG, forecast_hold_s=150.0))
    busy = _demand(current_replicas=2, arrival_rate=6.4, forecast_upper_rate=1.0)
    assert policy.recommend(busy, now=0.0).desired_replicas == 8
    low = _demand(current_replicas=8, ready_replicas=8, arrival_rate=0.5, forecast_upper_rate=0.5)
    held = policy.recommend(dataclasses.replace(low, release_replicas=3), now=200.0)
    assert (held.desired_replicas, held.reason) == (3, "stabilised")
    assert "measured rise" in held.message
    assert "one replica lost" in held.message
    stuck = policy.recommend(dataclasses.replace(low, release_replicas=3, stuck_replicas=1), now=210.0)
    assert stuck.desired_replicas == 4
    assert policy.recommend(dataclasses.replace(low, release_replicas=0), now=220.0).desired_replicas == 1
    # A release as large as the window's hold changes nothing.
    assert policy.recommend(dataclasses.replace(low, release_replicas=9), now=230.0).desired_replicas == 8


def test_measured_release_never_raises_a_decision() -> None:
    # Scale-ups and decisions the window does not hold ignore it.
    policy = ReplicaPolicy(CFG)
    rec = policy.recommend(_demand(forecast_upper_rate=4.0, release_replicas=0), now=0.0)
    assert rec.desired_replicas == 5
    low = _demand(current_replicas=8, ready_replicas=8, arrival_rate=0.5, forecast_upper_rate=0.5, release_replicas=30)
    assert ReplicaPolicy(CFG).recommend(low, now=0.0).desired_replicas == 1


@pytest.mark.parametrize("hold", [-1.0, 301.0])
def test_forecast_hold_outside_the_window_is_refused(hold: float) -> None:
    with pytest.raises(ValueError, match="forecast_hold_s"):
        dataclasses.replace(CFG, forecast_hold_s=hold)


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


def test_stages_apply_in_the_hpas_order_each_naming_the_reason_that_bound_last() -> None:
    """raw → stabilise → step limit → clamp: a scale-down the window holds at 8 is then cut to one step below
    the current 10, and a floor above that raises it once more; each stage's reason replaces the one before."""
    cfg = PolicyConfig(
        target_utilisation=1.0, scale_down_stabilisation_s=300.0, scale_down_max_step=1, headroom="fixed"
    )
    policy = ReplicaPolicy(cfg)
    busy = _demand(current_replicas=10, ready_replicas=10, arrival_rate=8.0, forecast_upper_rate=8.0)
    assert policy.recommend(busy, now=0.0).desired_replicas == 9  # a need of 8 (remembered), one step down from 10
    quiet = _demand(current_replicas=10, ready_replicas=10, arrival_rate=2.0, forecast_upper_rate=2.0)
    rec = policy.recommend(quiet, now=10.0)  # raw 2, stabilised at 8 (the need 10 s ago), then one step: 9
    assert (rec.desired_replicas, rec.reason) == (9, "step_limited")
    assert "holding 8 for the 300 s scale-down window" in rec.message  # the stabilisation stage ran first
    floored = ReplicaPolicy(dataclasses.replace(cfg, min_replicas=10, scale_down_max_step=0))
    rec = floored.recommend(quiet, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (10, "clamped_min")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_replicas": -1},  # negative floor
        {"min_replicas": 5, "max_replicas": 2},  # ceiling below floor
        {"target_utilisation": 0.0},  # would divide by zero
        {"queue_drain_s": 0.0},  # would divide by zero
        {"headroom": "proportional"},  # neither pooled nor fixed
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicyConfig(**kwargs)  # type: ignore[arg-type]


# -- pooled headroom (an option) -------------------------------------------------------------------------------------


def test_pooled_spare_is_one_replicas_share_at_one_replica_and_grows_as_the_square_root() -> None:
    # One replica keeps 1/0.8 - 1 = 25 % of itself spare, as the fixed rule; 4 replicas' load keeps 0.25·√4 = 0.5
    # (not 1), 144 replicas' 0.25·12 = 3 (not 36): the spare's share falls as the fleet grows.
    assert spare_replicas(1.0, 0.8) == pytest.approx(0.25)
    assert spare_replicas(4.0, 0.8) == pytest.approx(0.5)
    assert spare_replicas(144.0, 0.8) == pytest.approx(3.0)
    assert spare_replicas(0.25, 0.8) == pytest.approx(0.0625)  # under one replica: the fixed share, never more
    shares = [spare_replicas(load, 0.8) / load for load in (1.0, 3.0, 10.0, 30.0, 150.0)]
    assert shares == sorted(shares, reverse=True)
    assert shares[-1] < 0.03


def test_a_larger_fleet_gets_proportionally_less_spare() -> None:
    policy = ReplicaPolicy(PolicyConfig(scale_down_stabilisation_s=0.0, headroom="pooled"))
    fixed = ReplicaPolicy(PolicyConfig(scale_down_stabilisation_s=0.0, headroom="fixed"))

    def desired(p: ReplicaPolicy, rate: float) -> int:
        d = _demand(current_replicas=1, ready_replicas=1, arrival_rate=rate, forecast_upper_rate=rate)
        return p.recommend(d, now=0.0).desired_replicas

    assert desired(policy, 3.0) == desired(fixed, 3.0) == 4  # a small fleet: as the fixed rule (3 + 0.43)
    assert desired(policy, 150.0) == 154  # 150 + 0.25·√150 = 153.1
    assert desired(fixed, 150.0) == 188  # 150 / 0.8
    for rate in (1.0, 2.0, 5.0, 20.0, 80.0, 150.0):
        assert rate <= desired(policy, rate) <= desired(fixed, rate)


def test_forecast_margin_and_spare_add_as_independent_deviations() -> None:
    # 100 req/s forecast, q90 upper 110, capacity 1: spare 0.25·10 = 2.5, margin 10 → 100 + hypot(2.5, 10) = 110.3,
    # where the two stacked ask for 110 / 0.8 = 138.
    policy = ReplicaPolicy(PolicyConfig(headroom="pooled"))
    d = _demand(
        current_replicas=100, ready_replicas=100, arrival_rate=100.0, forecast_rate=100.0, forecast_upper_rate=110.0
    )
    rec = policy.recommend(d, now=0.0)
    assert rec.predictive_replicas == 111
    assert ReplicaPolicy(PolicyConfig(headroom="fixed")).recommend(d, now=0.0).predictive_replicas == 138
    # Neither margin alone is dropped: a wide forecast band still buys its replicas.
    wide = _demand(
        current_replicas=100, ready_replicas=100, arrival_rate=100.0, forecast_rate=100.0, forecast_upper_rate=140.0
    )
    assert policy.recommend(wide, now=0.0).predictive_replicas == 141  # 100 + hypot(2.5, 40) = 140.08


def test_a_queue_is_sized_with_the_pooled_spare_too() -> None:
    policy = ReplicaPolicy(PolicyConfig(queue_drain_s=2.0, headroom="pooled"))
    rec = policy.recommend(_demand(arrival_rate=36.0, forecast_upper_rate=36.0, requests_waiting=128.0), now=0.0)
    assert rec.reactive_replicas == 103  # (36 + 64) + 0.25·10 = 102.5


def test_enough_matches_what_the_policy_plans() -> None:
    for headroom in ("pooled", "fixed"):
        policy = ReplicaPolicy(PolicyConfig(headroom=headroom, scale_down_stabilisation_s=0.0))
        for rate in (0.5, 3.0, 17.0, 150.0):
            d = _demand(current_replicas=1, ready_replicas=1, arrival_rate=rate, forecast_upper_rate=rate)
            n = policy.recommend(d, now=0.0).desired_replicas
            assert policy.enough(n, rate, 1.0)
            assert not policy.enough(n - 1, rate, 1.0)


def test_a_heavier_mix_moves_pooled_replicas_up_and_a_lighter_one_down() -> None:
    # The same 40 req/s: a mix that costs a replica more work (capacity 10 → 8 req/s) needs more replicas, one that
    # costs less (10 → 16) fewer; the spare follows the load in replicas, not the request rate.
    policy = ReplicaPolicy(PolicyConfig(scale_down_stabilisation_s=0.0, headroom="pooled"))

    def desired(capacity: float) -> int:
        d = _demand(
            current_replicas=1,
            ready_replicas=1,
            capacity_rps=capacity,
            arrival_rate=40.0,
            forecast_rate=40.0,
            forecast_upper_rate=44.0,
        )
        return policy.recommend(d, now=0.0).desired_replicas

    assert [desired(c) for c in (16.0, 10.0, 8.0)] == [3, 5, 6]  # 2.5 + 0.47, 4 + 0.64, 5 + 0.75


@pytest.mark.parametrize(
    ("point", "upper", "replicas", "why"),
    [
        (0.5, 0.7, 1, "under one replica's planned load: one replica, no N+1 (min_replicas decides redundancy)"),
        (3.0, 3.0, 4, "the point at 0.8: ceil(3 / 0.8) = 4, already N+1 of ceil(3) = 3"),
        (3.0, 4.6, 5, "the upper bound at full capacity: ceil(4.6) = 5 (the fixed rule would order ceil(4.6/0.8) = 6)"),
        (8.4, 8.4, 11, "the point at 0.8: ceil(8.4 / 0.8) = 11 > N+1 = 10"),
        (1.7, 1.7, 3, "two replicas carry 1.7 at 0.8, but not with one lost: N+1 = ceil(1.7) + 1 = 3"),
    ],
)
def test_lean_keeps_one_margin_and_room_for_a_lost_replica(point: float, upper: float, replicas: int, why: str) -> None:
    assert lean_replicas(point, upper, 1.0, 0.8) == replicas, why


def test_lean_orders_fewer_than_fixed_for_the_same_forecast_and_the_same_for_a_queue() -> None:
    forecast = _demand(
        current_replicas=4, ready_replicas=4, arrival_rate=3.0, forecast_upper_rate=4.6, forecast_rate=3.0
    )
    fixed = ReplicaPolicy(PolicyConfig(headroom="fixed")).recommend(forecast, now=0.0)
    lean = ReplicaPolicy(PolicyConfig(headroom="lean")).recommend(forecast, now=0.0)
    assert (fixed.desired_replicas, lean.desired_replicas) == (6, 5)
    queued = _demand(current_replicas=2, ready_replicas=2, requests_waiting=8.0)  # the reactive part: one rule
    assert ReplicaPolicy(PolicyConfig(headroom="lean")).recommend(queued, now=0.0).desired_replicas == 7
    assert ReplicaPolicy(PolicyConfig(headroom="fixed")).recommend(queued, now=0.0).desired_replicas == 7


@pytest.mark.parametrize(
    ("sizing", "headroom", "ceiling"), [("safe", "fixed", 1.0), ("lean", "lean", 1.25), ("adaptive", "adaptive", 1.0)]
)
def test_sizing_selects_the_headroom_and_how_far_feedback_may_lift_capacity(
    sizing: str, headroom: str, ceiling: float
) -> None:
    cfg = planner_config(
        cold_start_s=120.0, tick_s=5.0, min_replicas=1, max_replicas=None, capacity=CapacityConfig(), sizing=sizing
    )
    assert cfg.policy.headroom == headroom
    assert cfg.feedback_ceiling == pytest.approx(ceiling)


def test_an_unknown_sizing_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="safe, lean, adaptive"):
        planner_config(
            cold_start_s=120.0, tick_s=5.0, min_replicas=1, max_replicas=None, capacity=CapacityConfig(), sizing="cheap"
        )


# -- adaptive headroom (sizing: adaptive) ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("share", "replicas", "why"),
    [
        (1.0, 8, "the whole margin: the fixed rule's ceil(6 / 0.8)"),
        (0.0, 4, "none of it: the point 3.2 at full capacity"),
        (0.5, 6, "half of it: 3.2 + 0.5 * (7.5 - 3.2) = 5.35"),
        (1.7, 8, "a share is at most the whole margin"),
    ],
)
def test_adaptive_keeps_a_share_of_the_fixed_margin(share: float, replicas: int, why: str) -> None:
    # point 3.2 req/s, upper bound 6 req/s, capacity 1 req/s per replica, utilisation 0.8
    assert adaptive_replicas(3.2, 6.0, 1.0, 0.8, share) == replicas, why


def test_adaptive_with_its_whole_margin_decides_as_fixed_and_thins_the_queues_share_too() -> None:
    forecast = _demand(
        current_replicas=4, ready_replicas=4, arrival_rate=3.0, forecast_upper_rate=4.6, forecast_rate=3.0
    )
    queued = _demand(current_replicas=2, ready_replicas=2, requests_waiting=8.0)  # (1.6 + 8 / 2) req/s
    for demand, fixed_replicas in ((forecast, 6), (queued, 7)):
        full = dataclasses.replace(demand, margin_scale=1.0)
        assert (
            ReplicaPolicy(PolicyConfig(headroom="adaptive")).recommend(full, now=0.0).desired_replicas
            == (ReplicaPolicy(PolicyConfig(headroom="fixed")).recommend(demand, now=0.0).desired_replicas)
            == fixed_replicas
        )
    thin = dataclasses.replace(queued, margin_scale=0.0)
    # a few requests always wait at tens of requests/s: the queue's share is thinned as well, ceil(5.6)
    assert ReplicaPolicy(PolicyConfig(headroom="adaptive")).recommend(thin, now=0.0).desired_replicas == 6


@pytest.mark.parametrize(
    ("demand", "said"),
    [
        (_demand(forecast_upper_rate=None, requests_waiting=4.0), "no forecast yet"),
        (_demand(arrival_rate=None, requests_waiting=None, forecast_upper_rate=4.0), "queue and arrivals not read"),
    ],
)
def test_a_part_not_known_is_said_in_words_not_as_none(demand: Demand, said: str) -> None:
    rec = ReplicaPolicy(CFG).recommend(demand, now=0.0)
    assert said in rec.message
    assert "None" not in rec.message


@pytest.mark.parametrize(
    ("tail", "replicas", "why"),
    [
        (None, 3, "no measured tail: the fixed rule, upper 2.2 / 0.8"),
        (3.5, 3, "a tail above what the fixed count serves at full capacity: never more than the fixed rule"),
        (1.9, 2, "the measured tail fits 2 replicas at full capacity, and the point 1.5 fits them at 0.8"),
        (1.0, 2, "a tail under the point: the point keeps its 0.8 headroom, 1.5 / 0.8"),
    ],
)
def test_a_measured_tail_replaces_the_fixed_rules_margin_where_it_is_smaller(
    tail: float | None, replicas: int, why: str
) -> None:
    demand = _demand(current_replicas=3, forecast_rate=1.5, forecast_upper_rate=2.2, forecast_tail_rate=tail)
    assert ReplicaPolicy(CFG).recommend(demand, now=0.0).predictive_replicas == replicas, why


def test_a_measured_tail_is_read_by_the_fixed_rule_only() -> None:
    demand = _demand(forecast_rate=1.5, forecast_upper_rate=2.2, forecast_tail_rate=1.6)
    lean = dataclasses.replace(CFG, headroom="lean")
    assert ReplicaPolicy(lean).recommend(demand, now=0.0).predictive_replicas == lean_replicas(1.5, 2.2, 1.0, 0.8)


def test_under_a_measured_tail_the_point_keeps_the_target_utilisation() -> None:
    # point 1.9 fits 2 replicas at full capacity but needs 3 at 0.8; the tail (1.95) needs 2 and the fixed rule 4
    demand = _demand(current_replicas=4, forecast_rate=1.9, forecast_upper_rate=2.6, forecast_tail_rate=1.95)
    assert ReplicaPolicy(CFG).recommend(demand, now=0.0).predictive_replicas == 3


@pytest.mark.parametrize(
    ("load", "rise", "expected"),
    [
        (1.2, 0.3, 3),  # 2 carry 1.5, but 1.2 with one of them lost needs 3 (N+1)
        (1.2, 1.5, 3),  # the rise above the spare: 2.7 needs 3 (the rise and a loss are not stacked)
        (1.2, 2.5, 4),
        (2.0, 0.0, 3),
        (0.9, 0.0, 1),  # a load one replica carries: its redundancy is min_replicas' business
        (0.9, 0.3, 2),
        (0.0, 0.0, 0),
        (0.0, 0.4, 1),
        (1.5, -1.0, 3),  # a negative rise is none
    ],
)
def test_release_replicas_carry_the_rise_or_one_lost(load: float, rise: float, expected: int) -> None:
    assert release_replicas(load, rise) == expected
