"""Least-squares line over the last ``window_s`` seconds, extrapolated to the horizon (damped).

Averaging a window fights Poisson noise the way EWMA does, but a fitted slope does not lag a ramp the way EWMA
does: on a slow drift buried in noise (Azure's conversation trace) it beats both last value and Holt, whose
one-step updates chase the noise.
"""

from __future__ import annotations

import itertools
import math

from scaler.forecast.base import Forecaster


class LinearTrend(Forecaster):
    name = "linear_trend"

    def __init__(self, *, window_s: float = 600.0, damping: float = 0.5, max_history: int = 4096) -> None:
        super().__init__(max_history=max_history)
        if not (math.isfinite(window_s) and window_s > 0) or not 0 <= damping <= 1:
            raise ValueError(f"linear_trend: window_s must be > 0 and damping in [0, 1], got {window_s}, {damping}")
        self.window_s, self.damping = window_s, damping

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        t_end = self._times[-1]
        pts = list(
            itertools.takewhile(
                lambda p: t_end - p[0] <= self.window_s, zip(reversed(self._times), reversed(self._values), strict=True)
            )
        )
        n = len(pts)
        if n < 3:
            last = self._values[-1]
            return last, last + self.horizon_spread(horizon_s)
        mt = sum(t for t, _ in pts) / n
        mv = sum(v for _, v in pts) / n
        var = sum((t - mt) ** 2 for t, _ in pts)
        slope = sum((t - mt) * (v - mv) for t, v in pts) / var if var > 0 else 0.0
        level = mv + slope * (t_end - mt)
        point = level + self.damping * slope * horizon_s
        return point, point + self.horizon_spread(horizon_s)
