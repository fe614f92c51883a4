"""A scikit-learn regressor over lag, rolling and time-of-day features, refit on a schedule from history.

Direct strategy: one model per horizon (in steps) learns x(t+h) − x(t) from features at t, so it inherits the
last value as its baseline and only has to learn the change. scikit-learn and numpy are imported lazily.
"""

from __future__ import annotations

import math
from typing import Any

from scaler.forecast.base import Forecaster

_LAGS = (1, 2, 3, 6, 12)
_ROLL = 12
_DAY_S = 86_400.0
MODELS = ("gradient_boosting", "ridge")


def _features(values: list[float], times: list[float], i: int, daily: bool = True) -> list[float]:
    """Features describing the series at index i (needs i >= max lag). Time of day only with ``daily``: fitted on
    less than a day, its sine and cosine are two more trends that a ridge extrapolates wildly."""
    v = values[i]
    lags = [v - values[i - lag] for lag in _LAGS]
    window = values[i - _ROLL + 1 : i + 1]
    mean = sum(window) / len(window)
    std = math.sqrt(sum((w - mean) ** 2 for w in window) / len(window))
    phase = 2 * math.pi * (times[i] % _DAY_S) / _DAY_S
    return [v, *lags, v - mean, std, *((math.sin(phase), math.cos(phase)) if daily else (0.0, 0.0))]


class Learned(Forecaster):
    name = "sklearn"

    def __init__(
        self,
        *,
        model: str = "gradient_boosting",
        refit_every: int = 60,
        window: int = 2000,
        min_points: int = 48,
        max_history: int = 4096,
    ) -> None:
        super().__init__(max_history=max_history)
        if model not in MODELS:
            raise ValueError(f"sklearn forecaster: unknown model {model!r}; choose one of {', '.join(MODELS)}")
        if refit_every < 1 or window < min_points:
            raise ValueError(f"sklearn forecaster: bad refit_every={refit_every} window={window}")
        self.model, self.refit_every, self.window, self.min_points = model, refit_every, window, min_points
        self._fitted: dict[int, tuple[Any, float, int, bool]] = {}  # steps -> (estimator, q90, seen at fit, daily)
        self._seen = 0

    def _update(self, t: float, value: float) -> None:
        self._seen += 1

    def _make(self) -> Any:
        if self.model == "ridge":
            from sklearn.linear_model import Ridge

            return Ridge(alpha=1.0)
        from sklearn.ensemble import GradientBoostingRegressor

        return GradientBoostingRegressor(n_estimators=60, max_depth=3, learning_rate=0.1, subsample=0.8, random_state=0)

    def _fit(self, k: int) -> tuple[Any, float, int, bool]:
        import numpy as np

        values, times = self.values[-self.window :], self.times[-self.window :]
        daily = times[-1] - times[0] >= _DAY_S
        start = max(_LAGS[-1], _ROLL - 1)
        rows = range(start, len(values) - k)
        x = np.asarray([_features(values, times, i, daily) for i in rows], dtype=float)
        y = np.asarray([values[i + k] - values[i] for i in rows], dtype=float)
        if len(y) < 8:
            raise ValueError("too little history for this horizon")
        est = self._make().fit(x, y)
        residuals = np.abs(y - est.predict(x))
        return est, float(np.quantile(residuals, 0.9)), self._seen, daily

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last = self._values[-1]
        k = max(1, self.horizon_steps(horizon_s))
        if self._seen < max(self.min_points, k + _LAGS[-1] + 8):
            return last, last + self.horizon_spread(horizon_s)
        fitted = self._fitted.get(k)
        # Refit on schedule, and sooner while the history is short: a model fit on the first minutes would
        # otherwise answer for the next `refit_every` observations (an hour at 15 s) from a few dozen rows.
        if fitted is None or self._seen - fitted[2] >= min(self.refit_every, max(8, fitted[2] // 2)):
            fitted = self._fit(k)
            self._fitted[k] = fitted
        import numpy as np

        est, q90, _, daily = fitted
        values, times = self.values[-(_LAGS[-1] + _ROLL) :], self.times[-(_LAGS[-1] + _ROLL) :]
        row = _features(values, times, len(values) - 1, daily)
        change = float(est.predict(np.asarray([row], dtype=float))[0])
        point = last + change
        return point, point + max(q90, 0.0)
