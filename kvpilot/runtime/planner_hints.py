"""What the control loop hands the detectors of the planner's last decisions, as plain numbers: ``detectors`` may
not import ``scaler`` (import-linter), so the loop carries the planner's per-replica capacity and its forecast
arrival rate at the horizon to ``kv_exhaustion`` (``Detection.set_demand``) for the next tick."""

from __future__ import annotations

from collections.abc import Sequence

from detectors.kv_exhaustion import Demand
from scaler.decision import Decision


def demand_hints(decisions: Sequence[Decision]) -> dict[str, Demand]:
    """Per deployment: what one ready replica serves (``capacity_rps``) and the arrival rate forecast at the
    horizon (``arrival_rate``), from each decision's numbers; either may be NaN (unknown)."""
    return {
        d.deployment: Demand(
            capacity_rps=d.forecast.get("capacity_rps"),
            forecast_rps=d.forecast.get("arrival_rate"),
            horizon_s=d.forecast.get("horizon_s", 0.0),
        )
        for d in decisions
    }
