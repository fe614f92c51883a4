"""Every detector, registered by kind, and the one entry point the control loop calls each tick.

``run_all`` returns this tick's raw candidates; ``Detection`` adds hysteresis (open after N bad ticks,
close after M clean) so the caller only sees findings worth acting on, plus what opened and closed, and keeps what
the detectors carry from tick to tick for its fleet state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Protocol

from collector.state import FleetState
from detectors import (
    kv_exhaustion,
    kv_transfer_stall,
    prefix_cache_miss,
    rollout,
    stuck_gpu,
    target_down,
    ttft_slo_burn,
)
from detectors.finding import Finding
from detectors.hysteresis import Hysteresis, Transitions
from detectors.kv_trend import KvTrends
from detectors.prefix_cache_miss import PrefixBaselines
from detectors.thresholds import DEFAULT, Thresholds


class Detector(Protocol):
    """What every detector module's ``detect`` is: pure, over the state, with time passed in."""

    def __call__(self, state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]: ...


DETECTORS: dict[str, Detector] = {
    kv_exhaustion.KIND: kv_exhaustion.detect,
    kv_transfer_stall.KIND: kv_transfer_stall.detect,
    prefix_cache_miss.KIND: prefix_cache_miss.detect,
    rollout.KIND: rollout.detect,
    stuck_gpu.KIND: stuck_gpu.detect,
    target_down.KIND: target_down.detect,
    ttft_slo_burn.KIND: ttft_slo_burn.detect,
}


def run_all(
    state: FleetState,
    *,
    now: float,
    thresholds: Thresholds = DEFAULT,
    only: Iterable[str] | None = None,
    detectors: Mapping[str, Detector] = DETECTORS,
    demand: Mapping[str, kv_exhaustion.Demand] | None = None,
    kv_trends: KvTrends | None = None,
    prefix_baselines: PrefixBaselines | None = None,
    replicas_asked: Mapping[str, int] | None = None,
    rollout_peaks: rollout.ReadyPeaks | None = None,
) -> list[Finding]:
    """Run the detectors (all, or the kinds in ``only``) once over ``state``; raw candidates, no hysteresis.
    ``demand``: the planner's capacity and forecast per deployment, for kv_exhaustion (the loop passes them in);
    ``replicas_asked``: the count of replicas asked for per deployment as the rollout stage reads it, for rollout
    (the loop passes it in); ``kv_trends``, ``prefix_baselines``, ``rollout_peaks``: what kv_exhaustion,
    prefix_cache_miss and rollout keep for ``state`` from tick to tick (``Detection`` holds them; without, this
    run's own)."""
    kinds = list(detectors) if only is None else list(only)
    unknown = [k for k in kinds if k not in detectors]
    if unknown:
        raise ValueError(f"unknown detector(s) {unknown}; known: {sorted(detectors)}")
    # What a detector reads besides the state, where it has such inputs.
    inputs: dict[Detector, Detector] = {
        kv_exhaustion.detect: partial(kv_exhaustion.detect, demand=demand or None, trends=kv_trends),
        prefix_cache_miss.detect: partial(prefix_cache_miss.detect, baselines=prefix_baselines),
        rollout.detect: partial(rollout.detect, replicas_asked=replicas_asked, peaks=rollout_peaks),
    }
    out: list[Finding] = []
    for kind in kinds:
        detect = detectors[kind]
        detect = inputs.get(detect, detect)
        out.extend(detect(state, thresholds=thresholds, now=now))
    return out


class Detection:
    """Detectors plus hysteresis: what the control loop owns across ticks, for one fleet state. It keeps the KV
    trends (``kv_trends``: the exported projection reuses them) and the prefix baselines of that state's replicas
    and deployments, and lets each go with its replica or deployment."""

    def __init__(
        self, thresholds: Thresholds = DEFAULT, *, only: Iterable[str] | None = None, restore: Iterable[Finding] = ()
    ) -> None:
        self.thresholds = thresholds
        self._only = None if only is None else tuple(only)
        self._hysteresis = Hysteresis(thresholds.policy)
        self._hysteresis.restore(restore)
        self._demand: dict[str, kv_exhaustion.Demand] = {}
        self._demand_trend = kv_exhaustion.DemandTrend(thresholds.kv.demand_trend_window_s)
        self.kv_trends = KvTrends()
        self.prefix_baselines = PrefixBaselines()
        self._replicas_asked: dict[str, int] | None = None
        self.rollout_peaks = rollout.ReadyPeaks()

    def set_replicas_asked(self, counts: Mapping[str, int]) -> None:
        """The count of replicas asked for per deployment, as the rollout stage reads it this tick
        (``RolloutStage.replicas_asked``), read by the next ``tick``: the rollout detector reads a deficit against a
        peak no higher than the most ready since that count last fell, as the stage does, so that a scale-down
        mid-rollout is no wave too wide. Never handed over (``kvpilot detect``): the window's peak alone."""
        self._replicas_asked = dict(counts)

    def set_demand(self, demand: Mapping[str, kv_exhaustion.Demand]) -> None:
        """The planner's capacity and forecast per deployment, read by the next ``tick`` (the control loop sets
        them after each decision; detectors cannot ask the scaler themselves)."""
        self._demand = dict(demand)

    def tick(self, state: FleetState, *, now: float) -> Transitions:
        demand = self._demand_trend.observe(now, self._demand)
        self.kv_trends.keep_only({view.key for view in state.replicas()})
        deployments = state.deployments().keys()
        self.prefix_baselines.keep_only(deployments)
        self.rollout_peaks.keep_only(deployments)
        candidates = run_all(
            state,
            now=now,
            thresholds=self.thresholds,
            only=self._only,
            demand=demand,
            kv_trends=self.kv_trends,
            prefix_baselines=self.prefix_baselines,
            replicas_asked=self._replicas_asked,
            rollout_peaks=self.rollout_peaks,
        )
        return self._hysteresis.update(candidates, now=now)

    def active(self) -> list[Finding]:
        return self._hysteresis.active()
