"""Sizing the pools of a disaggregated deployment, each on its own signal, one cold start ahead.

- Prefill (compute-bound) is sized on prompt tokens: the forecast of the pool's prompt-token rate at its horizon,
  plus the prompt tokens queued now drained within the TTFT target, over what one replica prefills per second
  (``ServingProfile.prefill_tokens_per_s``) at the target utilisation. Output length does not enter.
- Decode (memory-bound) is sized on sequences held (running, plus waiting) over its batch (below), or, with
  ``PoolsConfig.decode_tokens``, on output tokens: the forecast of the pool's generated-token rate at its horizon,
  plus the sequences waiting for admission (times the mean output) generated over the horizon, over what one
  replica generates holding the policy's target utilisation of its batch, over that share. Its batch: the most
  sequences whose step meets the ITL target (a step of n sequences costs ``decode_step_s`` plus n times a
  sequence's share, as in ``ServingProfile``) and whose KV fits the replica's pool at ``kv_target_usage``. Why: a
  sequence is held for its output times the step, and the step grows with the batch, so the sequences a load
  holds depend on the replicas serving it (two replicas' sequences on one replica are more, not the same) and a
  share of a replica's most sequences plans no share of its throughput. Prompt length enters only through KV
  per sequence.

Each pool has its own forecaster, cold start (its GPU type's) and live forecast error (``mase_<forecaster>`` in the
decision, exported per pool key as every decision's). The replica arithmetic (stabilisation, bounds, warm pool) is
``scaler.policy``'s, fed in the pool's own units. `PooledPlanner` decides pools this way and hands every other
deployment to the planner it wraps. Pure: no clock and no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from collector.roles import BOTH, DECODE, PREFILL, split_pool_key
from collector.state import DeploymentView, FleetState
from scaler.burst import BurstPeak, burst_need
from scaler.capacity import ServingProfile, SloFeedback, share_above
from scaler.decision import Decision
from scaler.forecast import Forecaster, make
from scaler.forecast.live_error import LiveMase
from scaler.planner import (
    DeploymentLimits,
    Planner,
    WindowedHistogram,
    _DeploymentPlanner,
    completion_rate,
    empty_view,
    replica_count,
)
from scaler.policy import Demand, PolicyConfig, Recommendation, ReplicaPolicy, need_phrase


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One pool's facts: what a replica of it is (``profile``, from its GPU type), its cold start, its bounds."""

    profile: ServingProfile
    cold_start_s: float = 120.0
    scaling_delay_s: float = 35.0  # tick + half a rate window, as planner_config adds to the cold start
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    forecaster: str = "auto"
    # The burst floor's window (`policy.burst_floor`, prefill only): half the 60 s rate window, as planner_config's.
    burst_window_s: float = 30.0
    # Decode measures the requests handed to it over this window (each replica's finished counter and requests in
    # flight, as the burst floor measures arrivals): the collector's rate window.
    arrival_window_s: float = 60.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cold_start_s) and self.cold_start_s >= 0):
            raise ValueError(f"pool planner: cold_start_s must be >= 0, got {self.cold_start_s!r}")
        if not (math.isfinite(self.scaling_delay_s) and self.scaling_delay_s >= 0):
            raise ValueError(f"pool planner: scaling_delay_s must be >= 0, got {self.scaling_delay_s!r}")
        make(self.forecaster)  # fail fast on a bad name
        if not (math.isfinite(self.burst_window_s) and self.burst_window_s > 0):
            raise ValueError(f"pool planner: burst_window_s must be > 0, got {self.burst_window_s!r}")
        if not (math.isfinite(self.arrival_window_s) and self.arrival_window_s > 0):
            raise ValueError(f"pool planner: arrival_window_s must be > 0, got {self.arrival_window_s!r}")

    @property
    def horizon_s(self) -> float:
        return self.cold_start_s + self.scaling_delay_s

    @property
    def burst_hold_s(self) -> float:
        """How long a burst's peak is held: a scale-down window and a cold start, as planner_config holds it (a burst
        recurring before a replica released after the window could be back still finds it)."""
        return self.policy.scale_down_stabilisation_s + self.cold_start_s


@dataclass(frozen=True, slots=True)
class PoolsConfig:
    prefill: PoolConfig
    decode: PoolConfig
    ttft_target_s: float = 2.0
    itl_target_s: float = 0.05
    kv_target_usage: float = 0.85  # plan KV below this share of the pool: past it vLLM starts preempting
    # A prefill pool that serves holds at least two replicas (within max_replicas; a pool scaled to zero stays at
    # zero). Its one replica is every request's only way to a first token, and it prefills a burst's prompts one
    # batch after another, so that a burst past one replica's tokens/s queues at once; decode batches a burst's
    # sequences (its capacity is concurrency, with ITL and KV headroom planned). A co-located fleet of the same two
    # GPUs has both to prefill a burst and one left after a failure. BENCHMARKS.md, "Disaggregated pools".
    prefill_spare: bool = True
    # The prefill pool's SLO feedback, as the co-located planner's (PlannerConfig's slo_target_miss and
    # queue_budget_share, same defaults): a prompt queued longer than this share of ttft_target_s, and whose first
    # token missed it, was delayed by too little capacity. The prefill replicas' own TTFT (arrival to the one
    # token they compute) and queue time are what the engine exports. Off by default: on Azure code x4 and
    # Mooncake it bought attainment at more than the frontier's price for it (BENCHMARKS.md).
    slo_feedback: bool = False
    # Decode planned in output tokens/s at a replica's batch (see the module's docstring) rather than in sequences
    # held. Off by default: on Azure conv x10 (decode H200) it keeps the pool from going to one replica and queueing
    # sequences for admission (96.45 % -> 98.49 % in SLO, $16.03 -> $14.98), but it costs decode more on Mooncake
    # (+10 % H200, +16 % A100 at the same attainment) and meets conv x10's A100 start later (BENCHMARKS.md).
    decode_tokens: bool = False
    slo_target_miss: float = 0.01
    queue_budget_share: float = 0.25

    def __post_init__(self) -> None:
        for name in ("ttft_target_s", "itl_target_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"pool planner: {name} must be > 0, got {v!r}")
        if not 0 < self.slo_target_miss < 1:
            raise ValueError(f"pool planner: slo_target_miss must be in (0, 1), got {self.slo_target_miss!r}")
        if not 0 < self.queue_budget_share <= 1:
            raise ValueError(f"pool planner: queue_budget_share must be in (0, 1], got {self.queue_budget_share!r}")
        if not 0 < self.kv_target_usage <= 1:
            raise ValueError(f"pool planner: kv_target_usage must be in (0, 1], got {self.kv_target_usage!r}")
        if self.itl_target_s <= self.decode.profile.decode_step_s:
            raise ValueError(
                f"pool planner: itl_target_s {self.itl_target_s} is below one decode step at batch 1 "
                f"({self.decode.profile.decode_step_s} s): no decode replica can meet it"
            )


def _sequence_step_s(profile: ServingProfile, context_tokens: float) -> float:
    """What one more sequence holding ``context_tokens`` of KV adds to a decode step (``ServingProfile``'s model)."""
    per_seq = (profile.max_num_seqs / profile.decode_tokens_per_s - profile.decode_step_s) / profile.max_num_seqs
    if profile.kv_read_tokens_per_s is not None:
        per_seq += max(context_tokens, 0.0) / profile.kv_read_tokens_per_s
    return per_seq


def decode_tokens_per_s(profile: ServingProfile, sequences: float, context_tokens: float) -> float:
    """Output tokens one replica generates per second decoding ``sequences`` together, each holding
    ``context_tokens`` of KV: one token each per step."""
    n = max(sequences, 1.0)
    return n / (profile.decode_step_s + n * _sequence_step_s(profile, context_tokens))


def sequences_within_itl(profile: ServingProfile, itl_target_s: float, context_tokens: float) -> float:
    """Most sequences one replica decodes together with a step no longer than ``itl_target_s``, each holding
    ``context_tokens`` of KV (``ServingProfile``'s step model), at most ``max_num_seqs``."""
    per_seq = _sequence_step_s(profile, context_tokens)
    room = itl_target_s - profile.decode_step_s
    if per_seq <= 0:
        return float(profile.max_num_seqs)
    return max(1.0, min(float(profile.max_num_seqs), room / per_seq))


@dataclass(slots=True)
class _Signal:
    """A pool's signal: forecast one horizon ahead, with its live error."""

    forecaster: Forecaster
    error: LiveMase

    def step(self, now: float, value: float | None, horizon_s: float) -> tuple[float | None, float | None]:
        if value is not None and math.isfinite(value):
            self.forecaster.observe(now, value)
        forecast = self.forecaster.predict(horizon_s)
        self.error.record(now, value, forecast.point)
        if not math.isfinite(forecast.point):
            return None, None
        return max(0.0, forecast.point), max(0.0, forecast.upper)


class _PoolPlanner:
    def __init__(self, key: str, pool: str, config: PoolsConfig) -> None:
        self.key = key
        self.pool = pool
        self.config = config
        self.own = config.prefill if pool == PREFILL else config.decode
        self.policy = ReplicaPolicy(self.own.policy)
        self.signal = _Signal(make(self.own.forecaster), LiveMase(self.own.horizon_s))
        self._kv_per_seq: float | None = None
        # A cut is judged one horizon later, when the replicas it ordered serve (as the co-located planner's).
        self.feedback = (
            SloFeedback(target_miss=config.slo_target_miss, settle_s=self.own.horizon_s)
            if pool == PREFILL and config.slo_feedback
            else None
        )
        self.queue_time = WindowedHistogram(window_s=60.0)
        # Requests arriving over a short window, their peak held (the burst floor, when the policy has it on).
        self.burst = BurstPeak(self.own.burst_window_s, self.own.burst_hold_s) if pool == PREFILL else None
        self._mean_prompt: float | None = None
        self._mean_output: float | None = None
        # Requests handed to decode per second: what it generates is capped by the replicas it has, this is not.
        self.handed = BurstPeak(self.own.arrival_window_s, 0.0) if pool == DECODE else None

    def decide(self, view: DeploymentView, now: float, current_replicas: int | None) -> Decision:
        current = replica_count(view) if current_replicas is None else current_replicas
        if self.pool == PREFILL:
            now_value, queued, capacity, numbers = self._prefill(view)
        else:
            now_value, queued, capacity, numbers = self._decode(view, now)
        point, upper = self.signal.step(now, now_value, self.own.horizon_s)
        # Queued work (prompts waiting for prefill, sequences waiting for decode's admission) is demand now, in the
        # pool's units; the policy's own queue term is for requests, so it gets none.
        demand_now = None if now_value is None else now_value + queued
        if self.feedback is not None:
            capacity = self._slo_corrected(view, now, demand_now, capacity)
            numbers["capacity_multiplier"] = self.feedback.multiplier
        rec = self.policy.recommend(
            Demand(
                current_replicas=current,
                ready_replicas=view.ready_replicas,
                capacity_rps=capacity,
                arrival_rate=demand_now,
                forecast_upper_rate=upper,
                requests_waiting=None,
                forecast_rate=point,
                burst_rate=self._burst_rate(view, now),
            ),
            now=now,
        )
        if rec.burst_floor_replicas is not None:
            numbers["burst_floor_replicas"] = float(rec.burst_floor_replicas)
        if self.pool == PREFILL and self.config.prefill_spare:
            rec = _with_spare(rec, self.own.policy.max_replicas)
        unit = (
            "prompt tokens/s"
            if self.pool == PREFILL
            else "output tokens/s"
            if self.config.decode_tokens
            else "sequences"
        )
        numbers.update(
            {
                "horizon_s": self.own.horizon_s,
                "signal_now": now_value if now_value is not None else math.nan,
                "signal_forecast": point if point is not None else math.nan,
                "signal_forecast_upper": upper if upper is not None else math.nan,
                "capacity_per_replica": capacity if capacity is not None else math.nan,
            }
        )
        mase = self.signal.error.value()
        if mase is not None:
            numbers[f"mase_{self.own.forecaster}"] = mase
        message = (
            f"{self.pool} pool: {rec.desired_replicas} replicas for {_n(demand_now)} {unit} now and {_n(upper)} at "
            f"the {self.own.horizon_s:.0f} s horizon ({_n(capacity)} a replica; "
            f"{need_phrase('the forecast', rec.predictive_replicas, 'no forecast yet')}, "
            f"{need_phrase('now', rec.reactive_replicas, 'nothing read now')}; {rec.reason})"
        )
        return Decision(
            deployment=self.key,
            timestamp=now,
            current_replicas=current,
            ready_replicas=view.ready_replicas,
            desired_replicas=rec.desired_replicas,
            warm_pool=rec.warm_pool,
            reason=rec.reason,
            message=message,
            predictive_replicas=rec.predictive_replicas,
            reactive_replicas=rec.reactive_replicas,
            forecast=numbers,
        )

    def _slo_corrected(self, view: DeploymentView, now: float, demand: float | None, capacity: float) -> float:
        """Capacity per replica times the SLO feedback's multiplier, after this tick's reading. Only a pool that
        held enough replicas for what arrived (at the capacity planned) can prove that capacity wrong: one still
        waiting for the replicas a forecast ordered late was short of replicas, not of capacity per replica."""
        feedback, cfg = self.feedback, self.config
        assert feedback is not None
        queued = (
            (view.queue_time_window.bounds, view.queue_time_window.counts)  # already an increase, by Prometheus
            if view.queue_time_window is not None
            else self.queue_time.update(now, [(r.key, r.sample.queue_time) for r in view.replicas])
        )
        serving = view.ready_replicas
        settled = (
            serving > 0 and demand is not None and self.policy.enough(serving, demand, capacity * feedback.multiplier)
        )
        if settled and queued is not None:
            bounds, counts = queued
            late = share_above(bounds, counts, cfg.ttft_target_s * cfg.queue_budget_share)
            ttft = view.ttft_window
            missed = None if ttft is None else share_above(ttft.bounds, ttft.counts, cfg.ttft_target_s)
            if late is not None and missed is not None:
                late = min(late, missed)
            feedback.update(now, late, counts[-1], serving)
        return capacity * feedback.multiplier

    def _burst_rate(self, view: DeploymentView, now: float) -> float | None:
        """Prompt tokens/s the recent burst peak needs prefilled for its last prompt to wait no more than the TTFT
        target (`scaler.burst`): the peak of requests arriving (each replica's finished counter plus the change in
        its requests in flight, as the co-located planner measures it) times the mean prompt over the rate window.
        None for decode, whose capacity is concurrency, and until both are known."""
        if self.burst is None:
            return None
        peak = self.burst.update(now, _in_flight(view))
        if peak is None or self._mean_prompt is None:
            return None
        return burst_need(peak * self._mean_prompt, self.own.burst_window_s, self.config.ttft_target_s)

    def _prefill(self, view: DeploymentView) -> tuple[float | None, float, float, dict[str, float]]:
        profile = self.own.profile
        rate = view.prompt_tokens_rate
        done = completion_rate(view) or 0.0
        mean_prompt = rate / done if rate and done else None
        if mean_prompt is not None:
            self._mean_prompt = mean_prompt
        waiting = view.requests_waiting or 0.0
        # Prompts waiting now are prefilled on top of what keeps arriving: within the TTFT target by the replicas
        # there are, but a replica ordered now serves only from the horizon on, so more than the horizon's worth of
        # replicas would be ordered for a queue they cannot reach (as planner_config's queue_drain_s).
        drain_s = max(self.config.ttft_target_s, self.own.horizon_s)
        queued = waiting * mean_prompt / drain_s if mean_prompt else 0.0
        numbers = {"prompt_tokens_rate": rate if rate is not None else math.nan, "queue": waiting}
        return rate, queued, profile.prefill_tokens_per_s, numbers

    def _decode(self, view: DeploymentView, now: float) -> tuple[float | None, float, float, dict[str, float]]:
        profile = self.own.profile
        running, waiting = view.requests_running, view.requests_waiting or 0.0
        kv_held = _kv_tokens_held(view)
        if kv_held is not None and running:
            self._kv_per_seq = kv_held / running
        context = self._kv_per_seq if self._kv_per_seq is not None else 0.0
        batch = sequences_within_itl(profile, self.config.itl_target_s, context)
        if self._kv_per_seq:
            # KV binds before the ITL does when sequences are long: a replica then holds fewer of them.
            batch = min(batch, profile.kv_tokens * self.config.kv_target_usage / self._kv_per_seq)
        rate = view.generation_tokens_rate
        done = completion_rate(view) or 0.0
        if rate and done:
            self._mean_output = rate / done
        assert self.handed is not None
        handed = self.handed.update(now, _in_flight(view))
        if rate is not None and handed is not None and self._mean_output:
            # A saturated pool generates what its replicas can; the sequences handed to it still owe their tokens.
            rate = max(rate, handed * self._mean_output)
        # Sequences waiting for admission are generated on top of what keeps arriving, over the horizon at the
        # soonest (a replica ordered now serves from then on), as prefill drains its queued prompts.
        drain_s = max(self.config.ttft_target_s, self.own.horizon_s)
        queued = waiting * self._mean_output / drain_s if self._mean_output else 0.0
        numbers = {
            "generation_tokens_rate": view.generation_tokens_rate
            if view.generation_tokens_rate is not None
            else math.nan,
            "requests_handed_rate": handed if handed is not None else math.nan,
            "sequences": (running or 0.0) + waiting,
            "batch_per_replica": batch,
            "kv_tokens_held": kv_held if kv_held is not None else math.nan,
            "kv_tokens_per_sequence": self._kv_per_seq if self._kv_per_seq is not None else math.nan,
            "queue": waiting,
        }
        # The policy plans a replica at target_utilisation of its capacity; decode's headroom is in its batch (free
        # slots and KV for sequences handed over), so a replica's capacity is what it generates holding that share
        # of its largest batch, over the share (a step shrinks with the batch: the same share of tokens/s would
        # hold far fewer sequences where KV reads dominate the step).
        share = self.own.policy.target_utilisation
        capacity = decode_tokens_per_s(profile, batch * share, context) / share
        numbers["tokens_per_s_at_batch"] = decode_tokens_per_s(profile, batch, context)
        if not self.config.decode_tokens:
            # sequences held (running) and waiting, over the batch
            return running, waiting, max(batch, 1e-9), numbers
        return rate, queued, capacity, numbers


def _with_spare(rec: Recommendation, max_replicas: int | None) -> Recommendation:
    """A serving prefill pool's second replica (``PoolsConfig.prefill_spare``), where the ceiling allows one."""
    floor = 2 if max_replicas is None else min(2, max_replicas)
    if not 0 < rec.desired_replicas < floor:
        return rec
    message = f"{rec.message}; raised to {floor}: a serving prefill pool keeps a spare replica"
    return replace(rec, desired_replicas=floor, reason="prefill_spare", message=message)


def _n(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0f}"


def _in_flight(view: DeploymentView) -> list[tuple[str, float | None, float | None]]:
    """Each replica's finished counter and requests in flight (waiting + running), as `scaler.burst` reads them."""
    counters = []
    for r in view.replicas:
        s = r.sample
        flight = None if s.requests_waiting is None else s.requests_waiting + (s.requests_running or 0.0)
        counters.append((r.key, s.requests_finished, flight))
    return counters


def _kv_tokens_held(view: DeploymentView) -> float | None:
    held = [
        r.sample.kv_usage * r.sample.kv_capacity_tokens
        for r in view.replicas
        if r.ready and r.sample.kv_usage is not None and r.sample.kv_capacity_tokens
    ]
    return sum(held) if held else None


class PooledPlanner:
    """Decides the pools of disaggregated deployments (keys ``namespace/name@prefill`` and ``@decode``) with a
    planner per pool, and every other deployment with ``inner`` (`scaler.planner.Planner`)."""

    def __init__(
        self, inner: Planner, config: PoolsConfig, *, overrides: Mapping[str, PoolsConfig] | None = None
    ) -> None:
        self.inner = inner
        self.config = config
        self.overrides = dict(overrides or {})  # by deployment key (namespace/name), both pools
        self._pools: dict[str, _PoolPlanner] = {}

    def limits(self, key: str) -> DeploymentLimits:
        """A pool's cold start and replica ceiling from its own pool configuration; another deployment's from
        ``inner``."""
        deployment, pool = split_pool_key(key)
        if pool == BOTH:
            return self.inner.limits(key)
        config = self.overrides.get(deployment, self.config)
        own = config.prefill if pool == PREFILL else config.decode
        return DeploymentLimits(cold_start_s=own.cold_start_s, max_replicas=own.policy.max_replicas)

    def warm(self, key: str, t: float, arrival_rate: float) -> None:
        """A deployment's stored request rate to its forecaster; a pool forecasts tokens or sequences, which stored
        request rates are not, so a pool's key is passed over."""
        if split_pool_key(key)[1] == BOTH:
            self.inner.warm(key, t, arrival_rate)

    def capacity(self, key: str) -> tuple[float, str] | None:
        """A deployment's capacity in requests/s; None for a pool (its capacity is in its own units)."""
        return self.inner.capacity(key) if split_pool_key(key)[1] == BOTH else None

    def planner_for(self, key: str) -> _PoolPlanner | _DeploymentPlanner:
        deployment, pool = split_pool_key(key)
        if pool == BOTH:
            return self.inner.planner_for(key)
        planner = self._pools.get(key)
        if planner is None:
            planner = self._pools[key] = _PoolPlanner(key, pool, self.overrides.get(deployment, self.config))
        return planner

    def forget(self, key: str) -> None:
        self._pools.pop(key, None)
        self.inner.forget(key)

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
        arrivals_totals: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        """The pools of disaggregated deployments sized per pool; every other deployment decided by ``inner``, with
        the gateway's rates and counts (``arrivals_totals``: its burst floor's) where the loop passes them."""
        counts = current_replicas or {}
        views = state.deployments()
        pooled = {k: v for k, v in views.items() if v.pool in (PREFILL, DECODE)}
        for key in counts:
            _, pool = split_pool_key(key)
            if pool != BOTH and key not in pooled:
                pooled[key] = replace(empty_view(key), name=key.partition("/")[2].rpartition("@")[0], pool=pool)
        decisions = [self._pools_decide(k, v, now, counts.get(k)) for k, v in pooled.items()]
        if len(pooled) < len(views) or any(split_pool_key(k)[1] == BOTH for k in counts):
            rest = self.inner.decide(
                _Without(state, set(pooled)),  # type: ignore[arg-type]
                now,
                current_replicas={k: c for k, c in counts.items() if k not in pooled},
                arrival_rates=arrival_rates,
                arrivals_totals=arrivals_totals,
            )
            decisions.extend(rest)
        return sorted(decisions, key=lambda d: d.deployment)

    def _pools_decide(self, key: str, view: DeploymentView, now: float, current: int | None) -> Decision:
        planner = self.planner_for(key)
        assert isinstance(planner, _PoolPlanner)
        return planner.decide(view, now, current)


class _Without:
    """A FleetState seen without some deployments (the pools `PooledPlanner` decided itself)."""

    def __init__(self, state: FleetState, hidden: set[str]) -> None:
        self._state = state
        self._hidden = hidden

    def deployments(self) -> dict[str, DeploymentView]:
        return {k: v for k, v in self._state.deployments().items() if k not in self._hidden}

    def __getattr__(self, name: str) -> object:
        return getattr(self._state, name)
