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

From the replicas alone, a ready replica that discovery stops listing while the count asked for holds reads as a
wave's drain — unless kvpilot removed it itself: the drain actuator tells the stage each pod it evicts
(``RolloutStage.note_removed``, wired in ``kvpilot.runtime.wiring``; the demo's stand-in eviction calls it too),
and such a disappearance within ``OWN_REMOVAL_MEMORY_S`` raises no surge.

The stage itself lives in ``scaler.rollout`` (below the composition root), so that the backtest replays the same
stage; this module is where the control loop takes it from.
"""

from __future__ import annotations

from scaler.rollout import DEFAULT_COLD_START_S, OWN_REMOVAL_MEMORY_S, RolloutStage

__all__ = ["DEFAULT_COLD_START_S", "OWN_REMOVAL_MEMORY_S", "RolloutStage"]
