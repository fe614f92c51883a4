"""How many requests per second one replica serves within the TTFT SLO, for the workload's token mix.

Capacity is kept in *work units* per second so that it transfers between token mixes: a request costs
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
class CapacityConfig:
    """``requests_per_s`` one replica sustains within the SLO at ``reference_mix`` (None: learn it)."""

    requests_per_s: float | None = None
    reference_mix: TokenMix = TokenMix(1000.0, 200.0)
    prompt_weight: float = 1.0
    output_weight: float = 4.0  # one decode token holds the batch about as long as a few prefill tokens
    saturated_queue_per_replica: float = 2.0  # waiting requests per ready replica that mean "at capacity"
    min_learned_samples: int = 3
    learn_half_life_samples: float = 10.0
    slo_share: float = 0.8  # share of the saturated throughput that still meets the SLO

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
    """Per-deployment capacity: configured, then refined from what saturated replicas actually delivered."""

    def __init__(self, config: CapacityConfig | None = None) -> None:
        self.config = config or CapacityConfig()
        c = self.config
        self._configured_units = None if c.requests_per_s is None else c.requests_per_s * self.cost(c.reference_mix)
        self._learned_units: float | None = None
        self.learned_samples = 0

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
    ) -> bool:
        """Learn from one tick if the deployment was saturated; returns whether the sample was used."""
        if (
            ready_replicas <= 0
            or requests_waiting is None
            or completion_rate is None
            or not math.isfinite(completion_rate)
            or completion_rate <= 0
            or requests_waiting < self.config.saturated_queue_per_replica * ready_replicas
        ):
            return False
        # Unknown mix: learn at the reference mix (the cost cancels when asked back without a mix).
        units = self.config.slo_share * completion_rate / ready_replicas * self.cost(mix or self.config.reference_mix)
        alpha = 1.0 - 0.5 ** (1.0 / self.config.learn_half_life_samples)
        self._learned_units = (
            units if self._learned_units is None else self._learned_units + alpha * (units - self._learned_units)
        )
        self.learned_samples += 1
        return True

    @property
    def source(self) -> str:
        """Where the current estimate comes from: "configured", "learned" or "unknown"."""
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

    def requests_per_s(self, mix: TokenMix | None = None) -> float | None:
        """Requests/s one replica sustains within the SLO for ``mix`` (the reference mix when None)."""
        source = self.source
        units = self._learned_units if source == "learned" else self._configured_units
        if units is None:
            return None
        return units / self.cost(mix or self.config.reference_mix)


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
    """

    target_miss: float = 0.01
    period_s: float = 60.0
    min_requests: float = 20.0
    decrease: float = 0.7
    increase: float = 0.02
    floor: float = 0.3
    ceiling: float = 1.0  # above 1: let clean traffic prove the profile too conservative
    multiplier: float = 1.0
    _last_t: float | None = None

    def __post_init__(self) -> None:
        if not (
            0 < self.target_miss < 1
            and 0 < self.decrease < 1
            and 0 < self.floor <= 1 <= self.ceiling
            and self.period_s > 0
        ):
            raise ValueError(f"slo feedback: bad configuration {self}")

    def update(self, now: float, miss: float | None, requests: float) -> float:
        if miss is None or requests < self.min_requests:
            return self.multiplier
        if self._last_t is not None and now - self._last_t < self.period_s:
            return self.multiplier
        self._last_t = now
        if miss > self.target_miss:
            self.multiplier = max(self.floor, self.multiplier * self.decrease)
        elif miss <= self.target_miss / 2:
            self.multiplier = min(self.ceiling, self.multiplier + self.increase)
        return self.multiplier
