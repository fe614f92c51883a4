"""Kalman filter on a local linear trend, as NVIDIA Dynamo's planner uses (`KalmanPredictor`).

State [level, slope]; x_t = x_{t−1} + v_{t−1} + w, v_t = v_{t−1} + u. Defaults are Dynamo's
(`kalman_q_level=1.0`, `kalman_q_trend=0.1`, `kalman_r=10.0`, `kalman_min_points=5`, planner_config.py).
Written in plain Python (2×2 matrices) so it needs neither filterpy nor numpy, and carries its own variance
for the upper quantile.
"""

from __future__ import annotations

import math

from scaler.forecast.base import UPPER_Z, Forecaster


class Kalman(Forecaster):
    name = "kalman"

    def __init__(
        self,
        *,
        q_level: float = 1.0,
        q_trend: float = 0.1,
        r: float = 10.0,
        min_points: int = 5,
        max_history: int = 4096,
    ) -> None:
        super().__init__(max_history=max_history)
        for label, v in (("q_level", q_level), ("q_trend", q_trend), ("r", r)):
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"kalman: {label} must be > 0, got {v!r}")
        self.q_level, self.q_trend, self.r, self.min_points = q_level, q_trend, r, min_points
        self._x = (0.0, 0.0)
        self._p = (1000.0, 0.0, 0.0, 1000.0)  # row-major 2x2 covariance
        self._n = 0

    def _step(self) -> None:
        (lv, sl), (p00, p01, p10, p11) = self._x, self._p
        self._x = (lv + sl, sl)
        # P = F P F' + Q with F = [[1, 1], [0, 1]]
        self._p = (p00 + p01 + p10 + p11 + self.q_level, p01 + p11, p10 + p11, p11 + self.q_trend)

    def _update(self, t: float, value: float) -> None:
        if self._n == 0:
            self._x = (value, 0.0)
            self._n = 1
            return
        self._step()
        (lv, sl), (p00, p01, p10, p11) = self._x, self._p
        s = p00 + self.r
        k0, k1 = p00 / s, p10 / s
        innovation = value - lv
        self._x = (lv + k0 * innovation, sl + k1 * innovation)
        self._p = (p00 - k0 * p00, p01 - k0 * p01, p10 - k1 * p00, p11 - k1 * p01)
        self._n += 1

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last = self._values[-1]
        if self._n < self.min_points:
            return last, last + self.horizon_spread(horizon_s)
        k = max(1, self.horizon_steps(horizon_s))
        (lv, sl), (p00, p01, p10, p11) = self._x, self._p
        point = lv + k * sl
        # Var of the k-step level: P00 + 2k P01 + k² P11 + k q_level + q_trend k(k−1)(2k−1)/6, plus R.
        var = p00 + k * (p01 + p10) + k * k * p11 + k * self.q_level + self.q_trend * k * (k - 1) * (2 * k - 1) / 6
        return point, point + UPPER_Z * math.sqrt(max(var + self.r, 0.0))
