"""The rest of a step that a windowed rate has only partly shown.

The planner's demand is a rate over a trailing window (the collector's `rate_window_s`, 60 s by default): when
demand steps from a to b, that rate ramps linearly from a to b over one window. Mid-ramp, last value forecasts a
level the series is still leaving. Undoing the window: w(t) − w(t − δ) = (r(t) − r(t − W)) · δ / W, so the rate
that arrives now is r(t) = r(t − W) + W · (w(t) − w(t − δ)) / δ, and before the step r(t − W) is w(t − W). The
forecast is that level, which the windowed rate reaches one window after the step, and keeps after.

Differencing amplifies noise W/δ-fold: on a noisy series this loses to last value, which is why it is one
candidate of `auto` (chosen only where its measured error at the horizon is lower), not a default on its own.
"""

from __future__ import annotations

import bisect
import math

from scaler.forecast.base import Forecaster


class WindowRamp(Forecaster):
    name = "window_ramp"

    def __init__(self, *, window_s: float = 60.0, max_history: int = 4096) -> None:
        super().__init__(max_history=max_history)
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_ramp: window_s must be > 0, got {window_s!r}")
        self.window_s = window_s

    def _at(self, t: float) -> float | None:
        """The value observed last at or before ``t`` (None before the history starts)."""
        times = self._times
        i = bisect.bisect_right(times, t) - 1
        return None if i < 0 else self._values[i]

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last = self._values[-1]
        spread = self.horizon_spread(horizon_s)
        if len(self._values) < 2:
            return last, last + spread
        t, prev_t, prev = self._times[-1], self._times[-2], self._values[-2]
        delta = t - prev_t
        before = self._at(t - self.window_s)
        # Samples further apart than the window show whole steps already: nothing is left to undo.
        if before is None or delta <= 0 or delta >= self.window_s:
            return last, last + spread
        level = before + self.window_s * (last - prev) / delta
        # The windowed rate moves from `before` towards `level`: the step is only in the direction it already went.
        if (last - before) * (level - last) < 0:
            level = last
        return level, level + spread
