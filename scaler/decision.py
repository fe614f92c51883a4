"""What the scaler decides for one deployment at one tick."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Decision:
    deployment: str  # "namespace/name"
    timestamp: float
    current_replicas: int
    ready_replicas: int
    desired_replicas: int
    warm_pool: int  # the part of `desired_replicas` loading now for demand at the horizon (beyond today's need)
    reason: str  # short machine-readable reason, e.g. "predictive", "reactive", "stabilised", "clamped_max"
    message: str  # sentence an operator reads
    predictive_replicas: int | None = None
    reactive_replicas: int | None = None
    forecast: dict[str, float] = field(default_factory=dict)  # e.g. arrival_rate, arrival_rate_upper, queue, horizon_s
