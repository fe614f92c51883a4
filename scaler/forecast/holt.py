"""Holt's linear (double exponential) smoothing with a damped trend: follows ramps without running away."""

from __future__ import annotations

import math

from scaler.forecast.base import UPPER_Z, Forecaster


class Holt(Forecaster):
    name = "holt"

    def __init__(
        self, *, alpha: float = 0.5, beta: float = 0.1, damping: float = 0.98, max_history: int = 4096
    ) -> None:
        super().__init__(max_history=max_history)
        for label, v in (("alpha", alpha), ("beta", beta), ("damping", damping)):
            if not (0.0 < v <= 1.0):
                raise ValueError(f"holt: {label} must be in (0, 1], got {v!r}")
        self.alpha, self.beta, self.damping = alpha, beta, damping
        self._level: float | None = None
        self._trend = 0.0
        self._sq_err = 0.0

    def _update(self, t: float, value: float) -> None:
        if self._level is None:
            self._level = value
            return
        forecast = self._level + self.damping * self._trend
        err = value - forecast
        level = forecast + self.alpha * err
        self._trend = self.damping * self._trend + self.beta * (level - self._level - self.damping * self._trend)
        self._level = level
        self._sq_err = 0.95 * self._sq_err + 0.05 * err * err

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        assert self._level is not None
        k = self.horizon_steps(horizon_s)
        phi = self.damping
        damped_sum = k if phi == 1.0 else phi * (1 - phi**k) / (1 - phi)
        point = self._level + damped_sum * self._trend
        margin = max(UPPER_Z * math.sqrt(self._sq_err * max(1, k)), self.horizon_spread(horizon_s))
        return point, point + margin
