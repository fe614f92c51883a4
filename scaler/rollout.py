"""Surge during a rolling update: how many replicas to ask for while a rollout replaces the old ones.

A rolling update drains old replicas while new ones load weights; for the length of one cold start per wave the
fleet serves with fewer ready replicas than the planner wanted, and TTFT's tail jumps. The mitigation is a surge:
ask for ``desired`` plus the replicas being replaced, and start that surge one cold start ahead of each wave, so
that by the time a wave drains its old replicas their successors are already warm. A pure function over plain
values, so the planner, the backtest and a test all call the same arithmetic.
"""

from __future__ import annotations

import math


def surge_replicas(
    *,
    desired: int,
    old_remaining: int,
    wave_size: int,
    wave_in_progress: bool,
    next_wave_in_s: float | None,
    cold_start_s: float,
    max_replicas: int | None = None,
) -> int:
    """Replicas to ask for during a rollout: ``desired`` (what demand needs, in ready replicas) plus the surge.

    - ``old_remaining``: replicas still on the old version, counting those of a wave in progress; 0 = no rollout.
    - ``wave_size``: replicas one wave replaces (a Deployment's maxSurge + maxUnavailable, or the rollout's own).
    - ``wave_in_progress``: a wave's new replicas are loading now; they do not serve yet, so the old ones they
      replace are still needed: the surge covers them.
    - ``next_wave_in_s``: seconds until the next wave starts (None: none planned). A wave starting within one cold
      start gets its surge now, so its successors are warm when it drains.
    - ``cold_start_s``: replica start to ready.
    - ``max_replicas``: the ceiling (the surge never lifts the answer above it; ``desired`` above it is kept).

    The surge never exceeds ``old_remaining``: a rollout cannot replace more replicas than it has left.
    """
    for name, value in (("desired", desired), ("old_remaining", old_remaining), ("wave_size", wave_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"surge_replicas: {name} must be an integer >= 0, got {value!r}")
    if not (isinstance(cold_start_s, int | float) and math.isfinite(cold_start_s) and cold_start_s >= 0):
        raise ValueError(f"surge_replicas: cold_start_s must be a finite number >= 0, got {cold_start_s!r}")
    if next_wave_in_s is not None and not (math.isfinite(next_wave_in_s) and next_wave_in_s >= 0):
        raise ValueError(f"surge_replicas: next_wave_in_s must be None or a finite number >= 0, got {next_wave_in_s!r}")
    if max_replicas is not None and (isinstance(max_replicas, bool) or max_replicas < 0):
        raise ValueError(f"surge_replicas: max_replicas must be None or >= 0, got {max_replicas!r}")
    waves = int(wave_in_progress) + int(next_wave_in_s is not None and next_wave_in_s <= cold_start_s)
    surge = min(old_remaining, wave_size * waves)
    if max_replicas is None:
        return desired + surge
    return max(desired, min(desired + surge, max_replicas))
