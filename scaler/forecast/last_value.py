"""Last value (naive) forecaster: the baseline every other model must beat (MASE's denominator)."""

from __future__ import annotations

from scaler.forecast.base import Forecaster


class LastValue(Forecaster):
    name = "last_value"

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last = self._values[-1]
        return last, last + self.horizon_spread(horizon_s)
