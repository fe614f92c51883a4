"""Least-squares line over the last ``window_s`` seconds, extrapolated to the horizon (damped).

Averaging a window fights Poisson noise the way EWMA does, but a fitted slope does not lag a ramp the way EWMA
does: on a slow drift buried in noise (Azure's conversation trace) it beats both last value and Holt, whose
one-step updates chase the noise.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator

from scaler.forecast.base import Forecaster


class LinearTrend(Forecaster):
    name = "linear_trend"

    def __init__(self, *, window_s: float = 600.0, damping: float = 0.5, max_history: int = 4096) -> None:
        super().__init__(max_history=max_history)
        if not (math.isfinite(window_s) and window_s > 0) or not 0 <= damping <= 1:
            raise ValueError(f"linear_trend: window_s must be > 0 and damping in [0, 1], got {window_s}, {damping}")
        self.window_s, self.damping = window_s, damping

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        times, t_end = self._times, self._times[-1]
        # Times rise, so "within the window" holds for a suffix: found by bisection rather than a test per point.
        n = len(times) - bisect.bisect_left(times, True, key=lambda t: t_end - t <= self.window_s)
        if n < 3:
            last = self._values[-1]
            return last, last + self.horizon_spread(horizon_s)
        # Newest first, each sum in the same order and each term the same operations as a loop over the points
        # would do (map and list only move the loop into C), so the fit is bit for bit that loop's.
        ts = list(itertools.islice(reversed(times), n))
        vs = list(itertools.islice(reversed(self._values), n))
        mt = sum(ts) / n
        mv = sum(vs) / n
        dts = [t - mt for t in ts]
        var = sum(map(pow, dts, itertools.repeat(2)))
        slope = sum(map(operator.mul, dts, [v - mv for v in vs])) / var if var > 0 else 0.0
        level = mv + slope * (t_end - mt)
        point = level + self.damping * slope * horizon_s
        return point, point + self.horizon_spread(horizon_s)
