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
