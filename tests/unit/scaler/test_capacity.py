"""Capacity: configured, learned from saturated periods only, and scaled by the token mix."""

from __future__ import annotations

import math

import pytest

from scaler.capacity import CapacityConfig, CapacityModel, SloFeedback, TokenMix, share_above

REF = TokenMix(1000.0, 200.0)


def test_configured_capacity_at_the_reference_mix() -> None:
    model = CapacityModel(CapacityConfig(requests_per_s=4.0, reference_mix=REF))
    assert model.source == "configured"
    assert model.requests_per_s(REF) == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        (TokenMix(2000.0, 400.0), 2.0),  # twice the work per request: half the requests
        (TokenMix(500.0, 100.0), 8.0),  # half the work: twice the requests
        (TokenMix(1000.0, 200.0), 4.0),  # the reference mix itself
    ],
)
def test_capacity_follows_the_token_mix(mix: TokenMix, expected: float) -> None:
    model = CapacityModel(CapacityConfig(requests_per_s=4.0, reference_mix=REF))
    assert model.requests_per_s(mix) == pytest.approx(expected)


def test_unknown_without_configuration_or_learning() -> None:
    assert CapacityModel().requests_per_s(REF) is None


@pytest.mark.parametrize(
    ("waiting", "used"),
    [
        (0.0, False),  # an idle queue says nothing about the ceiling
        (3.0, False),  # below 2 waiting per replica (2 replicas): not saturated
        (4.0, True),  # at the threshold: completions are the capacity
        (None, False),  # unknown queue: never learn from it
    ],
)
def test_learns_only_from_saturated_periods(waiting: float | None, used: bool) -> None:
    model = CapacityModel(CapacityConfig(min_learned_samples=1, slo_share=1.0))
    assert model.observe(ready_replicas=2, requests_waiting=waiting, completion_rate=6.0, mix=REF) is used
    assert (model.requests_per_s(REF) == pytest.approx(3.0)) is used


def test_learned_is_used_only_after_enough_samples_and_without_configuration() -> None:
    learned = CapacityModel(CapacityConfig(min_learned_samples=3, slo_share=1.0))
    configured = CapacityModel(
        CapacityConfig(requests_per_s=10.0, reference_mix=REF, min_learned_samples=3, slo_share=1.0)
    )
    for i in range(3):
        assert learned.source == "unknown", i
        for m in (learned, configured):
            m.observe(ready_replicas=1, requests_waiting=5.0, completion_rate=2.0, mix=REF)
    assert learned.requests_per_s(REF) == pytest.approx(2.0)
    # A profile measured at the SLO beats throughput under overload; the learned value is still reported.
    assert configured.source == "configured"
    assert configured.requests_per_s(REF) == pytest.approx(10.0)
    assert configured.learned_requests_per_s(REF) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "config",
    [
        {"requests_per_s": 0.0},  # zero capacity would divide by zero downstream
        {"requests_per_s": float("nan")},  # NaN from a broken profile
        {"prompt_weight": 0.0, "output_weight": 0.0},  # every request would cost nothing
    ],
)
def test_bad_configuration_is_refused(config: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="capacity"):
        CapacityConfig(**config)  # type: ignore[arg-type]


def test_bad_token_mix_is_refused() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        TokenMix(-1.0, 1.0)


BOUNDS = (0.5, 1.0, 2.5, math.inf)


@pytest.mark.parametrize(
    ("cumulative", "threshold", "expected"),
    [
        ((90.0, 95.0, 99.0, 100.0), 1.0, 0.05),  # a bound at the threshold: exact
        ((90.0, 95.0, 99.0, 100.0), 2.0, 0.01),  # between bounds: only what is above the next bound
        ((90.0, 95.0, 99.0, 100.0), 9.0, 0.0),  # past every finite bound: nothing known to be above
        ((0.0, 0.0, 0.0, 0.0), 1.0, None),  # an empty window says nothing
    ],
)
def test_share_above(cumulative: tuple[float, ...], threshold: float, expected: float | None) -> None:
    got = share_above(BOUNDS, cumulative, threshold)
    assert got == (None if expected is None else pytest.approx(expected))


def test_slo_feedback_cuts_on_misses_and_recovers_slowly() -> None:
    fb = SloFeedback(target_miss=0.01, period_s=60.0, decrease=0.5, increase=0.1, floor=0.2)
    assert fb.update(0.0, 0.05, 100) == 0.5  # 5 % late: halve
    assert fb.update(30.0, 0.05, 100) == 0.5  # once per period only
    assert fb.update(60.0, 0.5, 5) == 0.5  # too few requests to judge
    assert fb.update(120.0, 0.0, 100) == pytest.approx(0.6)  # clean window: +0.1
    for t in range(180, 3000, 60):
        fb.update(float(t), 0.0, 100)
    assert fb.multiplier == 1.0  # never above the profile
    for t in range(3000, 6000, 60):
        fb.update(float(t), 0.9, 100)
    assert fb.multiplier == 0.2  # never below the floor


def test_slo_feedback_waits_for_a_cut_to_serve_and_undoes_one_that_did_not_help() -> None:
    # Misses that more replicas do not fix (long prompts queued behind one another): the cut's replicas serve
    # 155 s later, the miss rate stays where it was, so the cut is undone and the same misses prompt no other.
    fb = SloFeedback(target_miss=0.01, period_s=60.0, decrease=0.7, settle_s=155.0)
    assert fb.update(0.0, 0.03, 100, serving=3) == pytest.approx(0.7)
    assert fb.update(60.0, 0.03, 100, serving=3) == pytest.approx(0.7)  # its replicas are still loading
    assert fb.update(120.0, 0.03, 100, serving=3) == pytest.approx(0.7)
    assert fb.update(180.0, 0.028, 100, serving=4) == 1.0  # 93 % of the misses left with a 4th: undone
    for t in range(240, 900, 60):
        assert fb.update(float(t), 0.03, 100, serving=3) == 1.0  # the same misses do not prompt the same bet
    assert fb.update(900.0, 0.06, 100, serving=3) == pytest.approx(0.7)  # twice as many do
    # A cut whose replicas never came (max_replicas, an advisory deployment) was not tried: it stays.
    assert fb.update(1080.0, 0.06, 100, serving=3) == pytest.approx(0.49)
    # A cut that helps stays, and the next waits for it too.
    helped = SloFeedback(target_miss=0.01, period_s=60.0, decrease=0.7, settle_s=155.0)
    helped.update(0.0, 0.08, 100)
    assert helped.update(180.0, 0.03, 100) == pytest.approx(0.49)  # kept (0.03 < 0.75 × 0.08), still missing
    assert helped.update(240.0, 0.03, 100) == pytest.approx(0.49)  # the new cut's replicas are on their way
    assert helped.update(360.0, 0.004, 100) == pytest.approx(0.51)  # it helped: kept, and clean now: +0.02
    assert helped.update(420.0, 0.004, 100) == pytest.approx(0.53)  # restores slowly


def test_clean_traffic_lifts_capacity_only_up_to_the_ceiling() -> None:
    # kvpilot's default ceiling is the profile's planned share (1: headroom for a lost replica stays); with a
    # ceiling of 1 / 0.8 an SLO kept clean lifts capacity to the profile itself and no further, misses cut it.
    from scaler.capacity import CapacityConfig
    from scaler.planner import planner_config

    cfg = planner_config(
        cold_start_s=120.0, tick_s=5.0, min_replicas=1, max_replicas=10, capacity=CapacityConfig(requests_per_s=1.0)
    )
    assert cfg.feedback_ceiling == 1.0
    fb = SloFeedback(ceiling=1.25, settle_s=cfg.horizon_s)
    for t in range(0, 3600, 60):
        fb.update(float(t), 0.0, 100, serving=3)
    assert fb.multiplier == pytest.approx(1.25)
    assert fb.update(3600.0, 0.05, 100, serving=3) == pytest.approx(0.875)
