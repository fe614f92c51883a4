"""A deployment's signals as Prometheus aggregated them (recording rules or the same expressions ad hoc).

The deployment-level twin of ``ReplicaSample``: what ``FleetState.observe_deployments`` turns into the same
``DeploymentView`` fields that summing ready replicas would give, without one object per replica.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.samples import Histogram


@dataclass(frozen=True, slots=True)
class DeploymentAggregate:
    """Sums, means and maxima over a deployment's replicas; rates per second over the expressions' window;
    histograms are bucket increases over that window. ``None``: no replica exports the value."""

    namespace: str
    deployment: str
    timestamp: float
    replicas: int  # targets Prometheus scrapes for it (`up`, any value)
    ready_replicas: int  # of which answered the latest scrape (`up == 1`)
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_usage_mean: float | None = None  # mean over replicas of each replica's mean over its engines
    kv_usage_max: float | None = None
    requests_finished_rate: float | None = None
    arrival_rate: float | None = None  # finished rate + d(waiting + running)/dt, clamped at 0
    prompt_tokens_rate: float | None = None
    generation_tokens_rate: float | None = None
    preemptions_rate: float | None = None
    prefix_hits_rate: float | None = None
    prefix_queries_rate: float | None = None
    ttft_window: Histogram | None = None
    itl_window: Histogram | None = None
    queue_time_window: Histogram | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.deployment}"
