"""Pool planners: prefill sized on prompt tokens and TTFT, decode on output tokens at the batch that ITL and KV
allow, each one cold start ahead with its own forecast error; a burst of long prompts grows prefill and leaves
decode alone."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState
from scaler.backtest.sim import serving_profile_fields
from scaler.capacity import CapacityConfig, ServingProfile
from scaler.decision import Decision
from scaler.planner import DeploymentLimits, Planner, PlannerConfig
from scaler.policy import PolicyConfig
from scaler.pools import PoolConfig, PooledPlanner, PoolsConfig, sequences_within_itl
from scaler.rollout_stage import RolloutStage
from simulator.profile import PROFILES

# what a benchmark of each simulated replica reads (the calibrated profiles: H100 for prefill, H200 for decode)
H100 = ServingProfile(**serving_profile_fields(PROFILES["llama3-8b-h100"]))  # type: ignore[arg-type]
H200 = ServingProfile(**serving_profile_fields(PROFILES["llama3-8b-h200"]))  # type: ignore[arg-type]
POLICY = PolicyConfig(min_replicas=1, max_replicas=32)
CONFIG = PoolsConfig(
    prefill=PoolConfig(H100, cold_start_s=60, policy=POLICY, forecaster="last_value"),
    decode=PoolConfig(H200, cold_start_s=180, policy=POLICY, forecaster="last_value"),
)
TOKENS = replace(CONFIG, decode_tokens=True)  # decode planned in output tokens/s


class _Pools:
    """Two prefill and two decode replicas of llm/chat, their counters advanced tick by tick."""

    def __init__(self) -> None:
        self.state = FleetState(rate_window_s=30)
        self.t = 0.0
        self.prompt = 0.0
        self.finished = 0.0
        self.generated = 0.0
        self.extra: dict[str, Histogram] = {}  # on each prefill replica's samples

    def tick(
        self,
        *,
        prompt_rate: float,
        req_rate: float,
        prefill_waiting: float,
        decode_running: float,
        output_rate: float | None = None,  # output tokens/s; 200-token outputs unless given
        decode_waiting: float = 0.0,
        decode_kv_usage: float = 0.3,
    ) -> None:
        self.t += 5.0
        self.prompt += prompt_rate * 5.0 / 2
        self.finished += req_rate * 5.0 / 2
        self.generated += (req_rate * 200 if output_rate is None else output_rate) * 5.0 / 2
        samples = []
        for i in range(2):
            samples.append(
                self._sample(
                    f"p{i}",
                    "prefill",
                    requests_waiting=prefill_waiting / 2,
                    requests_running=2.0,
                    prompt_tokens=self.prompt,
                    requests_finished=self.finished,
                    kv_usage=0.05,
                    **self.extra,
                )
            )
            samples.append(self._sample(f"d{i}", "decode", requests_waiting=decode_waiting / 2,
                                        requests_running=decode_running / 2, kv_usage=decode_kv_usage,
                                        requests_finished=self.finished, generation_tokens=self.generated))  # fmt: skip
        self.state.observe(samples, [], now=self.t)

    def _sample(self, name: str, role: str, **values: float | Histogram) -> ReplicaSample:
        base = ReplicaSample("llm", "chat", name, "n0", "vllm", "llama", self.t, role=role, kv_capacity_tokens=400_000)
        return replace(base, **values)  # type: ignore[arg-type]


def _desired(planner: PooledPlanner, pools: _Pools) -> dict[str, int]:
    counts = {"llm/chat@prefill": 2, "llm/chat@decode": 2}
    return {d.deployment: d.desired_replicas for d in planner.decide(pools.state, pools.t, current_replicas=counts)}


def test_a_burst_of_long_prompts_grows_prefill_and_not_decode() -> None:
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    for _ in range(60):  # 5 minutes steady: 10 req/s of 2,000-token prompts, 200 sequences decoding
        pools.tick(prompt_rate=20_000, req_rate=10, prefill_waiting=0, decode_running=200)
    before = _desired(planner, pools)
    for _ in range(12):  # one minute of 8,000-token prompts at the same request rate: prefill queues
        pools.tick(prompt_rate=80_000, req_rate=10, prefill_waiting=20, decode_running=200)
    during = _desired(planner, pools)
    assert during["llm/chat@prefill"] > before["llm/chat@prefill"]
    assert during["llm/chat@prefill"] >= math.ceil(80_000 / (H100.prefill_tokens_per_s * 0.8))
    assert during["llm/chat@decode"] == before["llm/chat@decode"]


def test_each_pool_forecasts_its_own_horizon_and_exports_its_error() -> None:
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    for i in range(80):  # decided every tick, as the loop does: the error is scored one horizon later
        pools.tick(
            prompt_rate=20_000 + 100 * i,
            req_rate=10,
            prefill_waiting=0,
            decode_running=100 + i,
            output_rate=2_000 + 20 * i,
        )
        decisions = {d.deployment: d for d in planner.decide(pools.state, pools.t)}
    prefill, decode = decisions["llm/chat@prefill"], decisions["llm/chat@decode"]
    assert (prefill.forecast["horizon_s"], decode.forecast["horizon_s"]) == (95.0, 215.0)  # cold start + delay
    assert prefill.forecast["mase_last_value"] > 0  # a rising signal: last value misses, and says by how much
    assert decode.forecast["mase_last_value"] > 0
    assert "prefill pool" in prefill.message
    assert "prompt tokens/s" in prefill.message
    assert "sequences" in decode.message
    assert decode.forecast["kv_tokens_per_sequence"] == pytest.approx(0.3 * 400_000 * 2 / (100 + 79), rel=0.05)


def test_decode_is_held_by_kv_when_sequences_are_long() -> None:
    # within ITL a replica would hold max_num_seqs; with 60,000 tokens each, KV holds far fewer
    assert sequences_within_itl(H200, 0.05, 1_000) == H200.max_num_seqs
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    pools.state = FleetState(rate_window_s=30)
    for _ in range(3):
        pools.tick(prompt_rate=1_000, req_rate=1, prefill_waiting=0, decode_running=12)
    # kv_usage 0.3 of 400k on two replicas = 240k tokens for 12 sequences: 20k a sequence
    decode = next(d for d in planner.decide(pools.state, pools.t) if d.deployment == "llm/chat@decode")
    assert decode.forecast["batch_per_replica"] == pytest.approx(H200.kv_tokens * 0.85 / 20_000, rel=0.01)


def _step_s(profile: ServingProfile, batch: float, context: float) -> float:
    """A decode step of ``batch`` sequences of ``context`` KV tokens each (ServingProfile's model), spelt out."""
    per_seq = (profile.max_num_seqs / profile.decode_tokens_per_s - profile.decode_step_s) / profile.max_num_seqs
    return profile.decode_step_s + batch * (per_seq + context / (profile.kv_read_tokens_per_s or math.inf))


def _decode_after(minutes: int, config: PoolsConfig = TOKENS, **tick: float) -> Decision:
    planner, pools = PooledPlanner(Planner(), config), _Pools()
    for _ in range(12 * minutes):
        pools.tick(prompt_rate=20_000, prefill_waiting=0, **{"req_rate": 10, **tick})
    counts = {"llm/chat@prefill": 2, "llm/chat@decode": 2}
    return next(d for d in planner.decide(pools.state, pools.t, current_replicas=counts) if "decode" in d.deployment)


def _planned_tokens_per_s(profile: ServingProfile, batch: float, context: float) -> float:
    """What the policy plans a decode replica to generate: its tokens/s holding 80 % (POLICY's target utilisation)
    of its largest batch."""
    return 0.8 * batch / _step_s(profile, 0.8 * batch, context)


def test_decode_is_sized_on_the_tokens_it_generates_not_the_sequences_its_replicas_hold() -> None:
    # Two H200s each decode 75 sequences of 1,600 KV tokens. 150 sequences are well under 80 % of one replica's
    # 256, but a sequence is held for its output times the step, and the step grows with the batch: the tokens
    # those two generate are more than one replica generates holding 80 % of its batch, so one would hold more
    # (Azure conv x10 went from two to one this way and queued 450 sequences for admission; BENCHMARKS.md)
    context = 0.3 * 400_000 / 75
    generated = 150 / _step_s(H200, 75, context)
    assert 0.8 * H200.max_num_seqs > 150
    assert generated > _planned_tokens_per_s(H200, H200.max_num_seqs, context)
    decode = _decode_after(5, decode_running=150, output_rate=generated)
    assert decode.forecast["capacity_per_replica"] * 0.8 == pytest.approx(
        _planned_tokens_per_s(H200, H200.max_num_seqs, context), rel=1e-6
    )
    assert decode.desired_replicas == 2
    assert "output tokens/s" in decode.message
    assert _decode_after(5, CONFIG, decode_running=150, output_rate=generated).desired_replicas == 1  # on sequences
    assert decode.forecast["tokens_per_s_at_batch"] == pytest.approx(
        H200.max_num_seqs / _step_s(H200, H200.max_num_seqs, context), rel=1e-6
    )


def test_sequences_waiting_for_decode_are_generated_over_the_horizon_not_held_at_once() -> None:
    # One replica's full batch and 2,000 sequences waiting for admission (a start a cold start short): the queue's
    # tokens are owed over the horizon (215 s), on top of what arrives, not 2,000 more sequences held together
    context = 0.85 * 400_000 / 128
    full = H200.max_num_seqs / _step_s(H200, H200.max_num_seqs, context)
    decode = _decode_after(
        3, decode_running=256, decode_waiting=2_000, output_rate=full, req_rate=full / 200, decode_kv_usage=0.85
    )
    owed = full + 2_000 * 200 / 215.0
    assert decode.desired_replicas == math.ceil(owed / _planned_tokens_per_s(H200, H200.max_num_seqs, context))
    assert decode.desired_replicas < (256 + 2_000) / (256 * 0.8)


def test_a_saturated_decode_pool_is_sized_on_the_sequences_handed_to_it() -> None:
    # Decode generates all its replicas can (a full batch each) and finishes 200-token sequences at that pace, while
    # sequences handed to it pile up 10 a second: what it generates is capped by the replicas it has, the tokens
    # owed are those of every sequence handed over (finished + the change in flight, over the rate window)
    context = 0.85 * 400_000 / 128
    full = H200.max_num_seqs / _step_s(H200, H200.max_num_seqs, context)
    planner, pools = PooledPlanner(Planner(), TOKENS), _Pools()
    for i in range(36):
        pools.tick(
            prompt_rate=20_000, req_rate=full / 200, prefill_waiting=0, decode_running=256,
            decode_waiting=50.0 * i, output_rate=full, decode_kv_usage=0.85,
        )  # fmt: skip
        decode = next(d for d in planner.decide(pools.state, pools.t) if "decode" in d.deployment)
    assert decode.forecast["requests_handed_rate"] == pytest.approx(full / 200 + 10, rel=0.01)
    assert decode.forecast["signal_now"] == pytest.approx(full + 10 * 200, rel=0.01)


def test_a_deployment_without_pools_goes_to_the_wrapped_planner() -> None:
    state = FleetState()
    for t in (0.0, 5.0):
        state.observe([ReplicaSample("llm", "solo", "s0", "n0", "vllm", "m", t, requests_waiting=0.0)], [], now=t)
    decisions = PooledPlanner(Planner(), CONFIG).decide(state, 5.0)
    assert [d.deployment for d in decisions] == ["llm/solo"]
    assert "pool" not in decisions[0].message


def test_config_refuses_an_itl_no_replica_meets() -> None:
    with pytest.raises(ValueError, match="below one decode step"):
        replace(CONFIG, itl_target_s=H200.decode_step_s / 2)


def test_the_control_loop_can_ask_any_key_for_its_capacity_and_warm_any_key() -> None:
    # kvpilot.runtime.loop persists Planner.capacity(key) and warm-starts Planner.warm(key, ...) for every key it knows
    inner = Planner(PlannerConfig(capacity=CapacityConfig(requests_per_s=4.0)))
    planner = PooledPlanner(inner, CONFIG)
    assert planner.capacity("llm/chat@decode") is None  # a pool's capacity is in its own units: nothing stored
    planner.warm("llm/chat@decode", 0.0, 3.0)  # accepted and passed over (a pool forecasts tokens, not requests)
    assert "llm/chat@decode" not in inner._planners
    assert planner.capacity("llm/solo") == (4.0, "configured")  # the wrapped planner's own model
    planner.warm("llm/solo", 30.0, 3.0)
    assert inner.planner_for("llm/solo").forecaster.predict(60.0).point == pytest.approx(3.0)


def test_each_pool_has_its_own_limits_and_the_rollout_stage_reads_them() -> None:
    # the rollout stage times its surge by a pool's own cold start and ceiling (it read PoolsConfig as a
    # PlannerConfig and raised, which skipped the stage for every deployment of the tick)
    planner = PooledPlanner(Planner(PlannerConfig(cold_start_s=90.0)), CONFIG)
    assert planner.limits("llm/chat@prefill") == DeploymentLimits(cold_start_s=60, max_replicas=32)
    assert planner.limits("llm/chat@decode") == DeploymentLimits(cold_start_s=180, max_replicas=32)
    assert planner.limits("llm/solo") == DeploymentLimits(cold_start_s=90.0, max_replicas=None)
    planned = [Decision(key, 0.0, 2, 2, 2, 0, "predictive", "steady") for key in ("llm/chat@prefill", "llm/solo")]
    assert RolloutStage().apply(FleetState(), planned, 0.0, planner=planner) == planned


def _one_replica_of_prompts(planner: PooledPlanner, minutes: int = 5) -> dict[str, int]:
    """Prefill at a quarter of one H100's prompt tokens, decode at a few sequences (100 tokens/s): each pool's load
    needs one."""
    pools = _Pools()
    for _ in range(12 * minutes):
        pools.tick(
            prompt_rate=H100.prefill_tokens_per_s / 4, req_rate=5, prefill_waiting=0, decode_running=4, output_rate=100
        )
    return _desired(planner, pools)


@pytest.mark.parametrize(
    ("config", "prefill", "decode"),
    [
        # a serving prefill pool keeps a second replica (one alone meets a burst, or its own failure, alone);
        # decode, which batches a burst's sequences, gets none
        (CONFIG, 2, 1),
        # without the rule, the load's one replica (what the pool held before it)
        (replace(CONFIG, prefill_spare=False), 1, 1),
        # the ceiling binds: an operator's max_replicas 1 is kept
        (replace(CONFIG, prefill=replace(CONFIG.prefill, policy=replace(POLICY, max_replicas=1))), 1, 1),
    ],
)
def test_a_serving_prefill_pool_keeps_a_spare_replica(config: PoolsConfig, prefill: int, decode: int) -> None:
    desired = _one_replica_of_prompts(PooledPlanner(Planner(), config))
    assert (desired["llm/chat@prefill"], desired["llm/chat@decode"]) == (prefill, decode)


def test_the_spare_is_said_in_the_decision() -> None:
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    for _ in range(60):
        pools.tick(
            prompt_rate=H100.prefill_tokens_per_s / 4, req_rate=5, prefill_waiting=0, decode_running=4, output_rate=100
        )
    decisions = {
        d.deployment: d for d in planner.decide(pools.state, pools.t, current_replicas={"llm/chat@prefill": 1})
    }
    assert decisions["llm/chat@prefill"].reason == "prefill_spare"
    assert decisions["llm/chat@prefill"].desired_replicas == 2


def _late_prefill(pools: _Pools, late_per_tick: float) -> None:
    """Each prefill replica's cumulative queue-time and TTFT histograms at the next tick: 25 requests a tick, of
    which ``late_per_tick`` queued past the budget and missed the target."""
    n = pools.t / 5.0 + 1
    on_time = 25.0 - late_per_tick
    queue = Histogram((0.3, 1.0, math.inf), (n * on_time, n * on_time, n * 25.0), 0.0, n * 25.0)
    ttft = Histogram((1.0, 2.5, math.inf), (n * on_time, n * 25.0, n * 25.0), 0.0, n * 25.0)
    pools.extra = {"queue_time": queue, "ttft": ttft}


def test_prefill_slo_feedback_answers_late_first_tokens_with_more_replicas() -> None:
    # a pool with enough replicas for its mean rate whose prompts still queue past the TTFT target (bursts within
    # the rate window) cuts its capacity per replica, as the co-located planner's SloFeedback does; off, it holds
    def run(config: PoolsConfig, late_per_tick: float) -> tuple[int, float]:
        planner, pools = PooledPlanner(Planner(), config), _Pools()
        for _ in range(72):
            _late_prefill(pools, late_per_tick)
            pools.tick(prompt_rate=40_000, req_rate=10, prefill_waiting=0, decode_running=20)
            d = next(d for d in planner.decide(pools.state, pools.t) if d.deployment == "llm/chat@prefill")
        return d.desired_replicas, d.forecast.get("capacity_multiplier", 1.0)

    with_feedback = replace(CONFIG, slo_feedback=True, ttft_target_s=1.0)
    assert run(with_feedback, late_per_tick=0.0) == (2, 1.0)  # on time: nothing to correct
    desired, multiplier = run(with_feedback, late_per_tick=5.0)  # a fifth late
    assert multiplier < 1.0
    assert desired > 2
    assert run(replace(with_feedback, slo_feedback=False), late_per_tick=5.0) == (2, 1.0)


def test_the_burst_floor_holds_prefill_for_its_last_burst_when_the_policy_has_it_on() -> None:
    # on/off prompts: a minute at 6 replicas' worth of prompt tokens, then silence, two prefill replicas serving.
    # The forecast falls in the silence; the policy's burst floor (off by default, as for a co-located deployment)
    # keeps what the burst's peak needed, in prompt tokens/s (requests arriving x the mean prompt)
    def after_a_burst(burst_floor: bool) -> tuple[int, float | None]:
        policy = replace(POLICY, burst_floor=burst_floor)
        config = replace(CONFIG, prefill=replace(CONFIG.prefill, policy=policy), prefill_spare=False)
        planner, pools = PooledPlanner(Planner(), config), _Pools()
        for _ in range(12):
            pools.tick(prompt_rate=100, req_rate=0.05, prefill_waiting=0, decode_running=1)
            planner.decide(pools.state, pools.t)
        burst_rate = 6 * H100.prefill_tokens_per_s
        for _ in range(12):
            pools.tick(prompt_rate=burst_rate, req_rate=burst_rate / 2_000, prefill_waiting=0, decode_running=1)
            planner.decide(pools.state, pools.t)
        for _ in range(20):  # 100 s of silence
            pools.tick(prompt_rate=0, req_rate=0, prefill_waiting=0, decode_running=0)
            decisions = {d.deployment: d for d in planner.decide(pools.state, pools.t)}
        prefill = decisions["llm/chat@prefill"]
        return prefill.desired_replicas, prefill.forecast.get("burst_floor_replicas")

    desired, floor = after_a_burst(burst_floor=True)
    assert floor is not None
    assert desired >= floor >= 5  # 6 replicas' worth x 30 / (30 + 2) at full capacity
    assert after_a_burst(burst_floor=False)[1] is None  # off: no floor asked


def test_a_first_tick_says_what_is_not_known_yet_in_words() -> None:
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    pools.tick(prompt_rate=20_000, req_rate=10, prefill_waiting=0, decode_running=100)  # one sample: no rate yet
    for decision in planner.decide(pools.state, pools.t):
        assert "None" not in decision.message, decision.message
        assert "?" not in decision.message, decision.message
