"""The control loop's rollout stage: after the planner decides, raise each deployment's decision by the surge its
rolling update needs (issue 16).

A rolling update drains old replicas while their successors load weights; for a cold start per wave the fleet
serves with fewer ready replicas than the planner asked for. The stage reads what the loop knows of a rollout —
the versions among the replicas it scrapes (``detectors.rollout.observe``: two versions, which one is new, the
ready deficit against the recent peak) and, where the scale source reads Kubernetes, the Deployment's own
status (generation/observedGeneration, updatedReplicas, the strategy's maxSurge + maxUnavailable) — turns it into
``scaler.rollout.RolloutStatus`` and publishes ``surge_replicas``: desired plus the replicas a wave is loading
(not capacity yet) plus the next wave's, once it is within a cold start. When the rollout is done the surge goes
and the planner's own count is published again. The planner (``scaler.planner``) is not touched: this is a
stage after it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from collector.state import FleetState
from detectors import rollout as rollout_detector
from detectors.thresholds import DEFAULT, Thresholds
from scaler.decision import Decision
from scaler.rollout import DeploymentRollout, RolloutTracker, VersionsSeen, surge_decision

log = logging.getLogger(__name__)

DEFAULT_COLD_START_S = 120.0


class RolloutStage:
    def __init__(self, thresholds: Thresholds = DEFAULT) -> None:
        self.thresholds = thresholds
        self.tracker = RolloutTracker()
        self._surging: set[str] = set()
        self._held: dict[str, int] = {}  # the largest surge published during each deployment's rollout

    def forget(self, key: str) -> None:
        self.tracker.forget(key)
        self._surging.discard(key)
        self._held.pop(key, None)

    def apply(
        self,
        state: FleetState,
        decisions: Sequence[Decision],
        now: float,
        *,
        planner: Any = None,
        deployments: Mapping[str, DeploymentRollout] | None = None,
    ) -> list[Decision]:
        """The decisions, each raised by its deployment's rollout surge (unchanged where none runs).
        ``planner``: where it has ``planner_for(key).config``, each deployment's cold start and max_replicas come
        from there; ``deployments``: the Deployment objects' rollout status, where the scale source read them."""
        views = state.deployments()
        out: list[Decision] = []
        for d in decisions:
            view = views.get(d.deployment)
            seen = None
            if view is not None:
                obs = rollout_detector.observe(state, view, self.thresholds, now)
                # current_replicas: the scale source's count (loading replicas included) where there is one
                seen = VersionsSeen(
                    obs.ready_by_version, obs.new_version, obs.ready, obs.peak_ready, obs.text, d.current_replicas
                )
            cold_start_s, max_replicas = _limits(planner, d.deployment)
            status = self.tracker.update(
                d.deployment,
                now,
                cold_start_s=cold_start_s,
                seen=seen,
                deployment=(deployments or {}).get(d.deployment),
            )
            if status is None:
                self._held.pop(d.deployment, None)
                if d.deployment in self._surging:
                    log.info("%s: rollout done, the surge is withdrawn (desired %d)", d.deployment, d.desired_replicas)
                    self._surging.discard(d.deployment)
                out.append(d)
                continue
            raised = surge_decision(d, status, cold_start_s=cold_start_s, max_replicas=max_replicas)
            # The surge never shrinks while the rollout runs: lowering the count mid-wave deletes a pod that is not
            # ready yet first (a ReplicaSet scales down unready pods first), which is the wave's own successor.
            surge = raised.desired_replicas - d.desired_replicas
            held = max(surge, self._held.get(d.deployment, 0))
            self._held[d.deployment] = held
            if held > surge:
                target = d.desired_replicas + held
                if max_replicas is not None:
                    target = max(d.desired_replicas, min(target, max_replicas))
                raised = dataclasses.replace(
                    raised,
                    desired_replicas=target,
                    reason="rollout_surge",
                    message=raised.message
                    if raised.reason == "rollout_surge"
                    else f"{d.message}; rollout surge held at +{held} until the rollout ends",
                    forecast={**raised.forecast, "rollout_surge": float(target - d.desired_replicas)},
                )
            if raised.desired_replicas > d.desired_replicas and d.deployment not in self._surging:
                log.info("%s: %s", d.deployment, raised.message)
                self._surging.add(d.deployment)
            out.append(raised)
        return out


def _limits(planner: Any, key: str) -> tuple[float, int | None]:
    """(cold start, max_replicas) of a deployment from ``Planner.planner_for(key).config``, where there is one."""
    planner_for = getattr(planner, "planner_for", None)
    if planner_for is None:
        return DEFAULT_COLD_START_S, None
    config = planner_for(key).config
    return float(config.cold_start_s), config.policy.max_replicas
