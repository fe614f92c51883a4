"""Exponentially weighted moving average: smooths noise, lags ramps (flat forecast at every horizon)."""

from __future__ import annotations

import math

from scaler.forecast.base import UPPER_Z, Forecaster


class Ewma(Forecaster):
    """EWMA with a half-life in seconds, so the smoothing means the same thing at any scrape interval."""

    name = "ewma"

    def __init__(self, *, half_life_s: float = 60.0, max_history: int = 4096) -> None:
        super().__init__(max_history=max_history)
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"ewma: half_life_s must be > 0, got {half_life_s!r}")
        self.half_life_s = half_life_s
        self._level: float | None = None
        self._var = 0.0
        self._last_t: float | None = None

    def _update(self, t: float, value: float) -> None:
        if self._level is None or self._last_t is None:
            self._level, self._last_t = value, t
            return
        alpha = 1.0 - 0.5 ** ((t - self._last_t) / self.half_life_s)
        err = value - self._level
        self._level += alpha * err
        self._var = (1 - alpha) * (self._var + alpha * err * err)
        self._last_t = t

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        assert self._level is not None
        margin = max(UPPER_Z * math.sqrt(self._var), self.horizon_spread(horizon_s))
        return self._level, self._level + margin
