"""The control loop's rollout stage (issue 16): after the planner decides, raise each deployment's decision by the
surge its rolling update needs, and scale it for a measured slower new version.

The stage itself lives in ``scaler.rollout_stage`` (below the composition root, where the module says how it works),
so that the backtest replays the same stage; this module is where the control loop takes it from.
"""

from __future__ import annotations

from scaler.rollout_stage import DEFAULT_COLD_START_S, OWN_REMOVAL_MEMORY_S, RolloutStage

__all__ = ["DEFAULT_COLD_START_S", "OWN_REMOVAL_MEMORY_S", "RolloutStage"]
