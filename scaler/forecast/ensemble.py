"""`auto`: an online ensemble that weights candidate forecasters by their own recent error at the horizon.

Which model wins depends on the workload — smoothing wins on Poisson noise, trend on ramps, seasonality on
daily cycles, last value on abrupt steps — and nobody should have to choose per deployment. Every candidate
forecasts the horizon each time `predict` is asked; when that moment arrives, its absolute error updates an
exponentially weighted score, and the forecast is the inverse-error-weighted mean of the candidates. The upper
bound is the point plus the 90th percentile of the ensemble's own realised under-forecasts, so it is calibrated
on this series rather than assumed.
"""

from __future__ import annotations

from collections import deque

from scaler.forecast.base import Forecaster
from scaler.forecast.ewma import Ewma
from scaler.forecast.holt import Holt
from scaler.forecast.last_value import LastValue
from scaler.forecast.learned import Learned
from scaler.forecast.linear_trend import LinearTrend
from scaler.forecast.seasonal_naive import SeasonalNaive

_SCORE_HALF_LIFE = 40.0  # scored predictions
_RESIDUALS = 400


def default_candidates() -> list[Forecaster]:
    return [
        LastValue(),
        Ewma(half_life_s=30.0),
        Ewma(half_life_s=120.0),
        Ewma(half_life_s=300.0),
        Holt(alpha=0.3, beta=0.05, damping=0.9),
        LinearTrend(window_s=300.0),
        LinearTrend(window_s=900.0),
        SeasonalNaive(season_s=86_400.0),
        Learned(model="ridge", refit_every=240, window=2000),
    ]


class Ensemble(Forecaster):
    name = "auto"

    def __init__(self, *, max_history: int = 4096, candidates: list[Forecaster] | None = None) -> None:
        super().__init__(max_history=max_history)
        self.candidates = candidates if candidates is not None else default_candidates()
        if not self.candidates:
            raise ValueError("auto forecaster: needs at least one candidate")
        self._scores: list[float | None] = [None] * len(self.candidates)
        self._pending: deque[tuple[float, list[float], float]] = deque()  # (target t, candidate points, blend)
        self._residuals: deque[float] = deque(maxlen=_RESIDUALS)  # truth − blended point

    def _update(self, t: float, value: float) -> None:
        for c in self.candidates:
            c.observe(t, value)
        alpha = 1.0 - 0.5 ** (1.0 / _SCORE_HALF_LIFE)
        while self._pending and self._pending[0][0] <= t + 1e-9:
            _, points, blend = self._pending.popleft()
            for i, p in enumerate(points):
                err = abs(p - value)
                old = self._scores[i]
                self._scores[i] = err if old is None else old + alpha * (err - old)
            self._residuals.append(value - blend)

    def weights(self) -> list[float]:
        """Inverse-error weights (uniform until every candidate has been scored)."""
        if any(s is None for s in self._scores):
            return [1.0 / len(self.candidates)] * len(self.candidates)
        scores = [max(s or 0.0, 1e-9) for s in self._scores]
        inv = [1.0 / (s * s) for s in scores]
        total = sum(inv)
        return [w / total for w in inv]

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        points = [c.predict(horizon_s).point for c in self.candidates]
        blend = sum(w * p for w, p in zip(self.weights(), points, strict=True))
        target = self._times[-1] + horizon_s
        if not self._pending or self._pending[-1][0] < target:
            self._pending.append((target, points, blend))
        if len(self._residuals) >= 20:
            ordered = sorted(self._residuals)
            margin = max(ordered[int(0.9 * (len(ordered) - 1))], 0.0)
        else:
            margin = self.horizon_spread(horizon_s)
        return blend, blend + margin
