"""How many requests per second one replica serves within the TTFT SLO, for the workload's token mix.

Two ways to know it. A ``ServingProfile`` says what a replica does in the work the GPU does — prompt tokens
prefilled per second, the decode step's time alone and with a full batch, the KV pool in tokens — and turns any
token mix into requests/s with the steady-state model of a continuous-batching engine (below), so that a shift
towards long prompts or long answers moves the replica count the right way. Without a profile, capacity is
learned online in *work units* per second: a request costs
``prompt_tokens · prompt_weight + output_tokens · output_weight`` units (prefill is batched and cheap per token,
decode holds a batch slot per output token). Requests/s for a mix is then ``units_per_s / cost(mix)``.

The number is either configured (from a profiling run, as Dynamo's planner does) or learned online from
saturated periods: while a queue persists, the replicas are serving as fast as they can, so the completion rate
per ready replica is the ceiling, and ``slo_share`` of it is what they sustain within the SLO. A configured
value wins (a profile measured at the SLO is better evidence than throughput under overload, which mixes
windows of prefill and completion); the learned one is used where nothing is configured, once enough
saturated samples agree, and is always reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenMix:
    """Mean tokens per request."""

    prompt_tokens: float
    output_tokens: float

    def __post_init__(self) -> None:
        for label, v in (("prompt_tokens", self.prompt_tokens), ("output_tokens", self.output_tokens)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"token mix: {label} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True, slots=True)
class ServingProfile:
    """One replica's speed in the work the GPU does, as a benchmark (or the engine's own numbers) measures it.

    ``prefill_tokens_per_s``: uncached prompt tokens per second at full compute (a long-prompt benchmark).
    ``decode_step_s``: one decode step with one sequence — the inter-token latency at batch 1 (weights read once).
    ``decode_tokens_per_s``: output tokens per second with a full batch (``max_num_seqs``) of short sequences.
    ``kv_tokens``: tokens the KV pool holds (vLLM logs it; ``vllm:cache_config_info`` exports it).
    ``kv_read_tokens_per_s``: KV tokens attention reads per second (HBM bandwidth / KV bytes per token).

    Steady state for mean prompt P (uncached U), output O, context c = P + O/2: at most
    n = min(max_num_seqs, kv_tokens / c) sequences decode together, a step of n costs
    T(n) = decode_step_s + n·(per-sequence cost + c / kv_read_tokens_per_s), a prefill of U costs
    p = U / prefill_tokens_per_s and rides between steps; a request holds a batch slot for O·T(n) + p, so one
    replica serves n / (O·T(n) + p·(1 + n)) requests/s at saturation. Plan below it (target utilisation).
    """

    prefill_tokens_per_s: float
    decode_step_s: float
    decode_tokens_per_s: float
    kv_tokens: float
    max_num_seqs: int = 256
    kv_read_tokens_per_s: float | None = None

    def __post_init__(self) -> None:
        for label in ("prefill_tokens_per_s", "decode_step_s", "decode_tokens_per_s", "kv_tokens"):
            v = getattr(self, label)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"serving profile: {label} must be a finite number > 0, got {v!r}")
        if self.max_num_seqs < 1:
            raise ValueError(f"serving profile: max_num_seqs must be >= 1, got {self.max_num_seqs!r}")
        if self.kv_read_tokens_per_s is not None and not (
            math.isfinite(self.kv_read_tokens_per_s) and self.kv_read_tokens_per_s > 0
        ):
            raise ValueError(f"serving profile: kv_read_tokens_per_s must be > 0, got {self.kv_read_tokens_per_s!r}")
        if self.max_num_seqs / self.decode_tokens_per_s < self.decode_step_s:
            raise ValueError(
                "serving profile: a full batch cannot be faster per step than one sequence "
                f"({self.max_num_seqs} / {self.decode_tokens_per_s} tokens/s < decode_step_s {self.decode_step_s})"
            )

    def requests_per_s(self, mix: TokenMix, prefix_hit_ratio: float = 0.0) -> float:
        """Requests/s one replica completes at saturation for this mix."""
        hit = min(max(prefix_hit_ratio, 0.0), 0.99) if math.isfinite(prefix_hit_ratio) else 0.0
        output = max(mix.output_tokens, 1.0)
        context = max(mix.prompt_tokens + output / 2.0, 1.0)
        n = max(min(float(self.max_num_seqs), self.kv_tokens / context), 1e-9)
        per_seq = (self.max_num_seqs / self.decode_tokens_per_s - self.decode_step_s) / self.max_num_seqs
        if self.kv_read_tokens_per_s is not None:
            per_seq += context / self.kv_read_tokens_per_s
        step = self.decode_step_s + n * per_seq
        prefill = mix.prompt_tokens * (1.0 - hit) / self.prefill_tokens_per_s
        return n / (output * step + prefill * (1.0 + n))

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_step_s": self.decode_step_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "kv_tokens": self.kv_tokens,
            "max_num_seqs": self.max_num_seqs,
            "kv_read_tokens_per_s": self.kv_read_tokens_per_s,
        }


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """Where capacity comes from: a ``profile`` (work the GPU does, turned into requests/s for each mix), a
    fixed ``requests_per_s`` at ``reference_mix``, or neither (learn it from saturated periods)."""

    profile: ServingProfile | None = None
    requests_per_s: float | None = None
    reference_mix: TokenMix = TokenMix(1000.0, 200.0)
    prompt_weight: float = 1.0
    output_weight: float = 4.0  # one decode token holds the batch about as long as a few prefill tokens
    saturated_queue_per_replica: float = 2.0  # waiting requests per ready replica that mean "at capacity"
    min_learned_samples: int = 3
    learn_half_life_samples: float = 10.0
    slo_share: float = (
        1.0  # share of the saturated throughput to call capacity (the policy's utilisation plans below it)
    )

    def __post_init__(self) -> None:
        if self.requests_per_s is not None and not (math.isfinite(self.requests_per_s) and self.requests_per_s > 0):
            raise ValueError(f"capacity: requests_per_s must be > 0, got {self.requests_per_s!r}")
        if self.prompt_weight < 0 or self.output_weight < 0 or self.prompt_weight + self.output_weight == 0:
            raise ValueError("capacity: token weights must be >= 0 and not both 0")
        if self.saturated_queue_per_replica <= 0:
            raise ValueError("capacity: saturated_queue_per_replica must be > 0")
        if not 0 < self.slo_share <= 1:
            raise ValueError(f"capacity: slo_share must be in (0, 1], got {self.slo_share!r}")


class CapacityModel:
    """Per-deployment capacity: a profile or a configured number, else learned from what replicas delivered."""

    def __init__(self, config: CapacityConfig | None = None) -> None:
        self.config = config or CapacityConfig()
        c = self.config
        self._configured_units = None if c.requests_per_s is None else c.requests_per_s * self.cost(c.reference_mix)
        self._learned_units: float | None = None
        self.learned_samples = 0

    def seed_learned(self, requests_per_s: float) -> bool:
        """Start from a learned capacity a previous run stored (requests/s one replica sustains at the reference mix,
        as ``requests_per_s()`` gave it), as if learned from ``min_learned_samples`` saturated samples: used at once,
        then moved by every saturated sample as a learned one is. Only into a model that has learned nothing yet
        (a sample this process saw wins); returns whether it was taken."""
        if self._learned_units is not None or not (math.isfinite(requests_per_s) and requests_per_s > 0):
            return False
        self._learned_units = requests_per_s * self.cost(self.config.reference_mix)
        self.learned_samples = self.config.min_learned_samples
        return True

    def cost(self, mix: TokenMix) -> float:
        """Work units of one request with this mix (at least a tiny positive number)."""
        c = self.config
        return max(mix.prompt_tokens * c.prompt_weight + mix.output_tokens * c.output_weight, 1e-9)

    def observe(
        self,
        *,
        ready_replicas: int,
        requests_waiting: float | None,
        completion_rate: float | None,
        mix: TokenMix | None,
        prompt_tokens_rate: float | None = None,
        generation_tokens_rate: float | None = None,
    ) -> bool:
        """Learn from one tick; returns whether the sample was used.

        The work replicas did is read from their token counters where they export them (prompt and output
        tokens per second), so a burst of long prompts is measured as the work it was, not as few requests at
        the usual mix. While a queue persists (saturated) that work is the ceiling and ``slo_share`` of it the
        capacity; when not saturated, work above the learned ceiling proves the ceiling too low and raises it,
        so a capacity learned during an unusual burst recovers.
        """
        if ready_replicas <= 0:
            return False
        work = self._work_rate(completion_rate, mix, prompt_tokens_rate, generation_tokens_rate)
        if work is None or work <= 0:
            return False
        per_replica = work / ready_replicas
        saturated = (
            requests_waiting is not None
            and requests_waiting >= self.config.saturated_queue_per_replica * ready_replicas
        )
        alpha = 1.0 - 0.5 ** (1.0 / self.config.learn_half_life_samples)
        if saturated:
            units = self.config.slo_share * per_replica
            self._learned_units = (
                units if self._learned_units is None else self._learned_units + alpha * (units - self._learned_units)
            )
            self.learned_samples += 1
            return True
        if self._learned_units is not None and self.config.slo_share * per_replica > self._learned_units:
            self._learned_units += alpha * (self.config.slo_share * per_replica - self._learned_units)
            return True
        return False

    def _work_rate(
        self,
        completion_rate: float | None,
        mix: TokenMix | None,
        prompt_tokens_rate: float | None,
        generation_tokens_rate: float | None,
    ) -> float | None:
        c = self.config
        if (
            prompt_tokens_rate is not None
            and generation_tokens_rate is not None
            and math.isfinite(prompt_tokens_rate + generation_tokens_rate)
        ):
            return max(prompt_tokens_rate, 0.0) * c.prompt_weight + max(generation_tokens_rate, 0.0) * c.output_weight
        if completion_rate is None or not math.isfinite(completion_rate) or completion_rate <= 0:
            return None
        # Unknown token counters: learn at the mix (the reference mix when unknown; it cancels when asked back).
        return completion_rate * self.cost(mix or c.reference_mix)

    @property
    def source(self) -> str:
        """Where the current estimate comes from: "profile", "configured", "learned" or "unknown"."""
        if self.config.profile is not None:
            return "profile"
        if self._configured_units is not None:
            return "configured"
        if self._learned_units is not None and self.learned_samples >= self.config.min_learned_samples:
            return "learned"
        return "unknown"

    def learned_requests_per_s(self, mix: TokenMix | None = None) -> float | None:
        """The learned estimate alone (None until enough saturated samples), for reporting beside the configured."""
        if self._learned_units is None or self.learned_samples < self.config.min_learned_samples:
            return None
        return self._learned_units / self.cost(mix or self.config.reference_mix)

    def requests_per_s(self, mix: TokenMix | None = None, prefix_hit_ratio: float | None = None) -> float | None:
        """Requests/s one replica sustains for ``mix`` (the reference mix when None)."""
        mix = mix or self.config.reference_mix
        if self.config.profile is not None:
            return self.config.profile.requests_per_s(mix, prefix_hit_ratio or 0.0)
        source = self.source
        units = self._learned_units if source == "learned" else self._configured_units
        if units is None:
            return None
        return units / self.cost(mix)


def share_above(bounds: tuple[float, ...], cumulative: tuple[float, ...], threshold: float) -> float | None:
    """Share of a cumulative histogram's observations above the first bucket bound >= ``threshold``; None when
    it holds no observations. No interpolation: between vLLM's 1 s and 2.5 s bounds a linear guess would call
    most 1-2 s first tokens misses. Put a bucket bound at the SLO for an exact answer."""
    total = cumulative[-1] if cumulative else 0.0
    if total <= 0:
        return None
    for bound, count in zip(bounds, cumulative, strict=True):
        if bound >= threshold:
            return max(0.0, min(1.0, 1.0 - count / total))
    return 0.0


@dataclass
class SloFeedback:
    """Corrects capacity by what the SLO actually shows, as Dynamo's planner corrects its profile by observed
    TTFT: a profile measured under Poisson arrivals overstates what a replica sustains on burstier traffic.

    Once per ``period_s`` with at least ``min_requests`` in the window: a miss rate above ``target_miss`` cuts
    the multiplier (multiplicative decrease), a miss rate under half of it restores it slowly (additive
    increase), within [``floor``, 1]. The multiplier scales the capacity the policy plans with.

    A cut is a bet that more replicas fix the misses, and it is checked: the replicas it orders serve only
    ``settle_s`` later (the planner's horizon: a cold start, a tick, half the rate window), so nothing more
    is cut until then; then, if more replicas serve than at the cut and the miss rate did not fall below
    ``helped_share`` of what prompted it, capacity was not what missed (long prompts behind one another, a
    slow replica) and the cut is undone.
    Misses at that level do not prompt another cut until they grow past it or clear.
    """

    target_miss: float = 0.01
    period_s: float = 60.0
    min_requests: float = 20.0
    decrease: float = 0.7
    increase: float = 0.02
    floor: float = 0.3
    ceiling: float = 1.0  # above 1: let clean traffic prove the profile too conservative
    settle_s: float = 0.0  # a cut's replicas serve this much later: judge it then (0: no check)
    helped_share: float = 0.75  # a cut that left more than this share of the misses it answered is undone
    multiplier: float = 1.0
    _last_t: float | None = None
    _cut: tuple[float, float, float, int | None] | None = None  # (at, miss it answered, multiplier before, serving)
    _unfixed_miss: float | None = None  # a miss rate that a cut was shown not to fix

    def __post_init__(self) -> None:
        if not (
            0 < self.target_miss < 1
            and 0 < self.decrease < 1
            and 0 < self.floor <= 1 <= self.ceiling
            and self.period_s > 0
        ):
            raise ValueError(f"slo feedback: bad configuration {self}")

    def update(self, now: float, miss: float | None, requests: float, serving: int | None = None) -> float:
        """One reading: the share of requests that missed, over how many, with how many replicas serving
        (a cut is judged only if more replicas serve than when it was made: else it was never tried)."""
        if miss is None or requests < self.min_requests:
            return self.multiplier
        if self._last_t is not None and now - self._last_t < self.period_s:
            return self.multiplier
        if self._cut is not None and self.settle_s > 0:
            at, prompted, before, serving_then = self._cut
            if now - at < self.settle_s:
                return self.multiplier  # its replicas are still on their way
            self._cut = None
            tried = serving is None or serving_then is None or serving > serving_then
            if tried and miss > self.helped_share * prompted:
                self._last_t, self.multiplier, self._unfixed_miss = now, before, prompted
                return self.multiplier
        self._last_t = now
        unfixed = self._unfixed_miss
        if miss > self.target_miss and (unfixed is None or miss > unfixed / self.helped_share):
            before = self.multiplier
            self.multiplier = max(self.floor, self.multiplier * self.decrease)
            self._cut = (now, miss, before, serving)
        elif miss <= self.target_miss / 2:
            self._unfixed_miss = None
            self.multiplier = min(self.ceiling, self.multiplier + self.increase)
        return self.multiplier
