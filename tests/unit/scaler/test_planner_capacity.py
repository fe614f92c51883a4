"""Capacity in the work a GPU does: a serving profile moves the replica count with the token mix, learned capacity
recovers after a burst, stuck replicas are neither capacity nor demand, and deployments at zero replicas are
decided too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState
from scaler.capacity import CapacityConfig, CapacityModel, ServingProfile, TokenMix
from scaler.decision import Decision
from scaler.planner import Planner, planner_config

# Roughly Llama-3-8B on one H100: 31k prompt tokens/s, 8.9 ms decode step alone, 9.7k tokens/s at 256 sequences.
PROFILE = ServingProfile(
    prefill_tokens_per_s=31_000.0,
    decode_step_s=0.0089,
    decode_tokens_per_s=9_700.0,
    kv_tokens=450_000.0,
    max_num_seqs=256,
    kv_read_tokens_per_s=17_800_000.0,
)
TICK_S = 5.0


@pytest.mark.parametrize(
    ("before", "after", "cheaper"),
    [
        (TokenMix(1000, 200), TokenMix(4000, 200), False),  # prompts grow 4×: fewer requests per replica
        (TokenMix(1000, 200), TokenMix(1000, 800), False),  # answers grow 4×: fewer requests per replica
        (TokenMix(15000, 300), TokenMix(2000, 300), True),  # long prompts give way to short: more per replica
    ],
)
def test_a_mix_shift_moves_capacity_the_right_way(before: TokenMix, after: TokenMix, cheaper: bool) -> None:
    assert (PROFILE.requests_per_s(after) > PROFILE.requests_per_s(before)) is cheaper


def test_prefix_hits_raise_capacity_and_long_contexts_are_bound_by_kv() -> None:
    mix = TokenMix(8000, 200)
    assert PROFILE.requests_per_s(mix, prefix_hit_ratio=0.6) > PROFILE.requests_per_s(mix)
    # 60k-token contexts fit 7 at a time in 450k KV tokens: far fewer per second than 2k-token ones.
    assert PROFILE.requests_per_s(TokenMix(60_000, 200)) < PROFILE.requests_per_s(TokenMix(2000, 200)) / 10


def test_profile_is_validated() -> None:
    with pytest.raises(ValueError, match="decode_tokens_per_s"):
        ServingProfile(prefill_tokens_per_s=1.0, decode_step_s=0.01, decode_tokens_per_s=0.0, kv_tokens=1.0)
    with pytest.raises(ValueError, match="full batch"):  # 256 sequences per step faster than one alone
        ServingProfile(prefill_tokens_per_s=1.0, decode_step_s=0.01, decode_tokens_per_s=1e9, kv_tokens=1.0)


def test_learned_capacity_is_the_work_done_and_recovers_after_a_burst() -> None:
    model = CapacityModel(CapacityConfig(min_learned_samples=1))
    # A burst of 30k-token prompts saturates one replica: 2 requests/s of them is 60k prompt tokens/s of work.
    for _ in range(5):
        model.observe(
            ready_replicas=1,
            requests_waiting=50.0,
            completion_rate=2.0,
            mix=TokenMix(1000, 200),  # the mix seen before the burst (the burst's is not observable while saturated)
            prompt_tokens_rate=60_000.0,
            generation_tokens_rate=400.0,
        )
    during = model.requests_per_s(TokenMix(1000, 200))
    assert during is not None
    assert during > 20.0  # the work units of 60k tokens/s, not "2 req/s at the usual mix"
    # Afterwards the replica does more work unsaturated than the burst's estimate: the estimate rises to it.
    for _ in range(40):
        model.observe(
            ready_replicas=1,
            requests_waiting=0.0,
            completion_rate=60.0,
            mix=TokenMix(1000, 200),
            prompt_tokens_rate=60_000.0,
            generation_tokens_rate=12_000.0,
        )
    after = model.requests_per_s(TokenMix(1000, 200))
    assert after is not None
    assert after > during * 1.2


def _sample(
    t: float,
    finished: float,
    *,
    replica: str = "llm-0",
    running: float = 4.0,
    tokens: float | None = None,
    waiting: float = 0.0,
    prompt: float | None = None,
    generated: float | None = None,
) -> ReplicaSample:
    made = finished if tokens is None else tokens
    return ReplicaSample(
        namespace="prod",
        deployment="llm",
        replica=replica,
        node="n",
        engine="vllm",
        model=None,
        timestamp=t,
        requests_waiting=waiting,
        requests_running=running,
        requests_finished=finished,
        prompt_tokens=made * 1000.0 if prompt is None else prompt,
        generation_tokens=made * 200.0 if generated is None else generated,
    )


def _planner(min_replicas: int = 1) -> Planner:
    return Planner(
        planner_config(
            cold_start_s=120.0,
            tick_s=TICK_S,
            min_replicas=min_replicas,
            max_replicas=100,
            capacity=CapacityConfig(profile=PROFILE),
        )
    )


def test_a_profile_decides_as_soon_as_the_mix_is_seen() -> None:
    # A profile turns a mix into requests/s: nothing to turn before the engines' counters show one (hold), then
    # capacity is known at once, with no saturated period needed.
    state, planner = FleetState(), _planner()
    reasons = []
    for i in range(6):
        t = i * TICK_S
        state.observe([_sample(t, 10.0 * i)], [], now=t)
        (d,) = planner.decide(state, t)
        reasons.append(d.reason)
    assert reasons[0] == "no_capacity"
    assert reasons[-1] != "no_capacity"
    assert d.forecast["capacity_rps"] == pytest.approx(PROFILE.requests_per_s(TokenMix(1000, 200)), rel=0.01)


def _with_a_stuck_replica(planner: Planner, ticks: int, current: Callable[[int], int]) -> Decision:
    """Two replicas: one serves 2 req/s; the other holds 300 waiting requests and makes no progress at all; the
    scale subresource reads ``current(tick)``. The last tick's decision."""
    state = FleetState()
    for i in range(ticks):
        t = i * TICK_S
        ok = _sample(t, 10.0 * i)
        stuck = _sample(t, 0.0, replica="llm-1", running=8.0, tokens=0.0, waiting=300.0)
        state.observe([ok, stuck], [], now=t)
        (d,) = planner.decide(state, t, current_replicas={"prod/llm": current(i)})
    return d


def test_a_stuck_replica_is_neither_capacity_nor_demand_and_is_kept_on_top() -> None:
    d = _with_a_stuck_replica(_planner(), 14, lambda _: 2)
    assert d.ready_replicas == 1  # the stuck one is not counted as serving
    assert d.forecast["stuck_replicas"] == 1.0
    assert d.forecast["stranded_requests"] == 300.0
    assert d.desired_replicas == 2  # one serving replica is enough for 2 req/s; the stuck one keeps its place
    assert "stuck" in d.message


def test_a_deployment_at_zero_replicas_is_still_decided() -> None:
    state, planner = FleetState(), _planner(min_replicas=0)
    # Demand first: the forecaster learns 2 req/s while one replica serves.
    for i in range(14):
        t = i * TICK_S
        state.observe([_sample(t, 10.0 * i)], [], now=t)
        planner.decide(state, t)
    # Scaled to zero (no pods, so none in the fleet): a decision still comes, from the forecaster's history.
    t = 14 * TICK_S
    state.observe([], [], now=t, departed={"prod/llm-0"})
    (d,) = planner.decide(state, t, current_replicas={"prod/llm": 0})
    assert (d.deployment, d.current_replicas) == ("prod/llm", 0)
    assert d.desired_replicas >= 1  # the demand it saw is forecast to go on: wake it


def test_a_deployment_never_seen_at_zero_holds_at_its_floor() -> None:
    (d,) = _planner(min_replicas=0).decide(FleetState(), 0.0, current_replicas={"prod/new": 0})
    assert d.desired_replicas == 0


def test_forget_drops_a_deleted_deployment() -> None:
    state, planner = FleetState(), _planner()
    state.observe([_sample(0.0, 0.0)], [], now=0.0)
    planner.decide(state, 0.0)
    first = planner.planner_for("prod/llm")
    planner.forget("prod/llm")
    assert planner.planner_for("prod/llm") is not first


@pytest.mark.parametrize(
    ("rate", "waiting", "desired"),
    [
        (0.003, 0.0, 0),  # a decayed forecast: less than one request before a replica could load, none needed
        (0.003, 2.0, 1),  # but requests waiting at the router always need a replica
        (0.5, 0.0, 1),  # a real trickle keeps one
    ],
)
def test_min_replicas_zero_lets_a_trickle_scale_to_zero(rate: float, waiting: float, desired: int) -> None:
    from scaler.policy import Demand, PolicyConfig, ReplicaPolicy

    policy = ReplicaPolicy(PolicyConfig(min_replicas=0, idle_below_rps=1 / 125, scale_down_stabilisation_s=0))
    demand = Demand(
        current_replicas=1,
        ready_replicas=1,
        capacity_rps=8.5,
        arrival_rate=rate,
        forecast_upper_rate=rate,
        requests_waiting=waiting,
    )
    assert policy.recommend(demand, now=0.0).desired_replicas == desired


def _one_replica_at_2_rps(
    planner: Planner,
    until_s: float,
    mix_at: Callable[[float], TokenMix],
    queue_per_tick_at: Callable[[float], float] = lambda t: 0.0,
) -> float:
    """One replica finishing 2 req/s at ``mix_at(t)`` while its queue grows ``queue_per_tick_at(t)`` a tick, until
    ``until_s``: the capacity planned at the last tick."""
    state = FleetState()
    finished = prompt = generated = waiting = 0.0
    t = 0.0
    while t <= until_s:
        waiting += queue_per_tick_at(t)
        sample = _sample(t, finished, waiting=waiting, prompt=prompt, generated=generated)
        state.observe([sample], [], now=t)
        (d,) = planner.decide(state, t)
        mix = mix_at(t)
        finished, prompt, generated = (
            finished + 10.0,
            prompt + 10.0 * mix.prompt_tokens,
            generated + 10.0 * mix.output_tokens,
        )
        t += TICK_S
    return d.forecast["capacity_rps"]


def _capacity_after_a_mix_step(heavy: TokenMix, *, queue_per_tick: float, minutes_after: float) -> float:
    """The capacity one replica is planned with ``minutes_after`` a step in the mix: 20 minutes of 2 req/s at
    1,000 prompt / 200 output tokens, then 2 req/s completed at ``heavy``, the queue growing ``queue_per_tick``."""
    step_at = 20 * 60.0
    return _one_replica_at_2_rps(
        _planner(),
        step_at + minutes_after * 60.0,
        lambda t: TokenMix(1000, 200) if t < step_at else heavy,
        lambda t: queue_per_tick if t >= step_at else 0.0,
    )


def test_a_heavier_mix_is_read_once_it_has_saturated_the_fleet_for_a_rate_window() -> None:
    # ServeGen's rate and mix step together: the heavier requests queue at once, and a mix read only in a steady
    # state stayed at the light one through the whole overload (day 7 of the trace: docs/scaling.md, "Capacity").
    light, heavy = PROFILE.requests_per_s(TokenMix(1000, 200)), PROFILE.requests_per_s(TokenMix(4000, 200))
    planned = _capacity_after_a_mix_step(TokenMix(4000, 200), queue_per_tick=5.0, minutes_after=10)
    assert planned < light - 0.25 * (light - heavy)


def test_the_first_rate_window_of_a_saturation_does_not_move_the_mix() -> None:
    # A burst's first seconds read heavy (prefill runs ahead of completions): Azure code's on/off minutes would
    # hold an extra replica after each.
    light = PROFILE.requests_per_s(TokenMix(1000, 200))
    planned = _capacity_after_a_mix_step(TokenMix(4000, 200), queue_per_tick=5.0, minutes_after=0.9)
    assert planned == pytest.approx(light, rel=0.01)


def test_a_lighter_mix_read_under_saturation_is_not_believed() -> None:
    # Under saturation a reading may only make the mix heavier: one that overstates costs replicas for a while,
    # one that understates would cost the SLO.
    light = PROFILE.requests_per_s(TokenMix(1000, 200))
    planned = _capacity_after_a_mix_step(TokenMix(250, 50), queue_per_tick=5.0, minutes_after=10)
    assert planned == pytest.approx(light, rel=0.01)


def _saturated_from_the_start(ticks: int, *, heavy_ticks: int | None = None) -> list:
    """Two replicas with a profile, overloaded from the first tick: each finishes 2 req/s at 4,000 prompt / 200
    output tokens while its queue grows 20 a tick (no steady state, so no mix is ever believed there). After
    ``heavy_ticks`` (if given) the queues are gone and 2 req/s a replica arrive and finish at 1,000 / 200."""
    state, planner = FleetState(), _planner()
    totals = {r: [0.0, 0.0, 0.0] for r in ("llm-0", "llm-1")}  # finished, prompt, generated
    decisions = []
    for i in range(ticks):
        t = i * TICK_S
        overloaded = heavy_ticks is None or i < heavy_ticks
        samples = []
        for r, total in totals.items():
            samples.append(
                _sample(
                    t,
                    total[0],
                    replica=r,
                    waiting=20.0 * (i + 1) if overloaded else 0.0,
                    prompt=total[1],
                    generated=total[2],
                )
            )
            prompt = 4000.0 if overloaded else 1000.0
            total[0], total[1], total[2] = total[0] + 10.0, total[1] + 10.0 * prompt, total[2] + 10.0 * 200.0
        state.observe(samples, [], now=t)
        (d,) = planner.decide(state, t, current_replicas={"prod/llm": 2})
        decisions.append(d)
    return decisions


def test_a_fleet_saturated_from_its_first_tick_scales_from_the_mix_read_under_saturation() -> None:
    # Before: no steady state, so no mix, so no capacity from the profile: holding (`no_capacity`) for as long as
    # the overload lasted, while the queue grew (kvpilot demo on Mooncake ×8: 85 holds, 2,936 waiting on 2 replicas).
    decisions = _saturated_from_the_start(20)
    held = [d for d in decisions if d.reason == "no_capacity"]
    # Holding only while the saturated reading is not yet a whole rate window (60 s) old, and saying why.
    assert 0 < len(held) <= 60 / TICK_S + 1
    assert "saturated for" in held[-1].message
    last = decisions[-1]
    assert last.reason != "no_capacity"
    assert last.desired_replicas > 2
    # The capacity is the profile's at the mix the counters show, as measured: no guess, and the message says so.
    assert last.forecast["capacity_rps"] == pytest.approx(PROFILE.requests_per_s(TokenMix(4000, 200)), rel=0.02)
    assert "mix read under saturation (4000 prompt, 200 output tokens" in last.message


def test_the_mix_read_under_saturation_gives_way_to_the_first_steady_one() -> None:
    # The saturated reading sizes the fleet only until a mix can be believed: it is not kept as a floor under it.
    last = _saturated_from_the_start(40, heavy_ticks=20)[-1]
    assert last.forecast["capacity_rps"] == pytest.approx(PROFILE.requests_per_s(TokenMix(1000, 200)), rel=0.05)
    assert "under saturation" not in last.message


def _capacity_after_a_light_opening(minutes: float, *, evidence_weighted: bool) -> float:
    """One replica started empty: its counters show 250 prompt / 50 output tokens a request over the first 15 s
    (only short requests finished yet), then 1,000 / 200, at a steady 2 req/s; the capacity planned ``minutes`` in."""
    planner = Planner(replace(_planner().config, mix_evidence_weighted=evidence_weighted))
    return _one_replica_at_2_rps(
        planner, minutes * 60.0, lambda t: TokenMix(250, 50) if t < 15.0 else TokenMix(1000, 200)
    )


def test_with_mix_evidence_weighted_the_first_reading_weighs_the_service_its_window_holds() -> None:
    # `kvpilot demo --seed 64`: the first steady reading covered the 15 s the fleet had served (683 prompt / 87
    # output tokens a request, against ~1,000 / 260 from the next minute on) and, as the seed of a 600 s half-life,
    # held capacity at about twice the profile's through the opening rise. Weighed by the 15 s it covers, it gives
    # way to the full windows within minutes; by default (the seeded belief) it does not.
    light, heavy = PROFILE.requests_per_s(TokenMix(250, 50)), PROFILE.requests_per_s(TokenMix(1000, 200))
    assert _capacity_after_a_light_opening(0.25, evidence_weighted=True) > 1.5 * heavy  # all there is to read yet
    assert _capacity_after_a_light_opening(3.0, evidence_weighted=True) < heavy + 0.1 * (light - heavy)
    assert _capacity_after_a_light_opening(3.0, evidence_weighted=False) > heavy + 0.4 * (light - heavy)


def test_once_readings_fill_the_half_life_the_weighted_mix_steps_as_the_seeded_one() -> None:
    # The evidence weighting changes only the start: after a few half-lives a reading moves the belief by
    # 1 - 0.5^(gap / half-life), the exponentially weighted mean's own step.
    config = replace(_planner().config, mix_evidence_weighted=True)
    planner = Planner(config).planner_for("prod/llm")
    t = 0.0
    while t <= 3 * 3600.0:
        planner._observe_mix(t, TokenMix(1000, 200), ready=1)
        t += TICK_S
    t += 55.0  # a minute without a reading (saturated, or not steady)
    belief = planner._observe_mix(t, TokenMix(3000, 400), ready=1)
    assert belief is not None
    step = 1.0 - 0.5 ** (60.0 / config.mix_half_life_s)
    assert belief.prompt_tokens == pytest.approx(1000 + step * 2000, rel=1e-3)
    assert belief.output_tokens == pytest.approx(200 + step * 200, rel=1e-3)


def test_the_first_readings_weight_is_bounded_by_the_rate_window_not_the_saturation_setting() -> None:
    # A fleet that had served long before its first reading: the reading holds one rate window of service. With
    # the saturated-mix reading turned off (saturated_mix_after_s 0) that window was taken as 60 s whatever the
    # collector's rate window (review G, session 15); it is the rate window.
    def first_weight(**changes: float) -> float:
        config = replace(_planner().config, mix_evidence_weighted=True, **changes)
        planner = Planner(config).planner_for("prod/llm")
        planner._observe_mix(0.0, None, ready=1)  # serving from 0 s, no steady reading yet
        planner._observe_mix(500.0, TokenMix(1000, 200), ready=1)  # its window holds a rate window of service
        return planner._mix_evidence

    half_life = _planner().config.mix_half_life_s
    assert first_weight(rate_window_s=120.0, saturated_mix_after_s=0.0) == pytest.approx(1 - 0.5 ** (120 / half_life))
    assert first_weight(rate_window_s=120.0) == first_weight(rate_window_s=120.0, saturated_mix_after_s=0.0)


def test_a_release_made_while_a_replica_is_stuck_is_recorded_in_serving_replicas() -> None:
    # One replica serves 2 req/s, one is stuck; a third (not ready yet) joins the count at the last tick. One
    # serving replica is enough: the planner asks for 2 (1 serving + the stuck one) where 3 are, a release from 2
    # serving replicas to 1. The next burst that needs 1.5 replicas, met by the 1 serving replica, proves it wrong,
    # and the floor is the 2 serving replicas released from (the policy puts the stuck one on top: 3, the count
    # released from). Recorded with the stuck one (3 -> 2), the 1 serving replica that met a need of 1.5 read as
    # enough for "2 released to", and a floor of 3 became 4 once the policy added the stuck one.
    planner = _planner()
    d = _with_a_stuck_replica(planner, 15, lambda i: 3 if i == 14 else 2)
    assert (d.current_replicas, d.desired_replicas, d.forecast["stuck_replicas"]) == (3, 2, 1.0)
    regret = planner.planner_for("prod/llm").regret
    assert regret.judge(d.timestamp + 1.0, current=1, need=1.5, missed=True) == 2
