"""ARIMA via statsmodels (imported lazily), refit on a schedule; Dynamo's planner default is (auto-)ARIMA.

Fitting is the expensive part, so the model is refit every ``refit_every`` observations on the most recent
``window`` points and otherwise reused (its forecast origin is moved with ``append`` without refitting).
``order="auto"`` picks (p, d, q) by AIC over p, q ≤ 2 and d ≤ 1 at the first fit, a small stand-in for
pmdarima's ``auto_arima`` stepwise search that Dynamo uses (pmdarima is not a dependency here).
"""

from __future__ import annotations

import math
from typing import Any

from scaler.forecast.base import UPPER_Z, Forecaster


class Arima(Forecaster):
    name = "arima"

    def __init__(
        self,
        *,
        order: tuple[int, int, int] | str = (2, 1, 1),
        window: int = 240,
        refit_every: int = 12,
        min_points: int = 12,
        max_history: int = 4096,
    ) -> None:
        super().__init__(max_history=max_history)
        if (order != "auto" and (isinstance(order, str) or min(order) < 0)) or window < 8 or refit_every < 1:
            raise ValueError(f"arima: bad configuration order={order} window={window} refit_every={refit_every}")
        self.auto = order == "auto"
        self.order: tuple[int, int, int] = (1, 1, 1) if isinstance(order, str) else order
        self.window, self.refit_every, self.min_points = window, refit_every, min_points
        self._result: Any = None
        self._fitted_at = 0  # number of observations when last (re)fitted or appended
        self._seen = 0

    def _update(self, t: float, value: float) -> None:
        self._seen += 1

    def _fit(self) -> Any:
        import warnings

        import numpy as np
        from statsmodels.tsa.arima.model import ARIMA

        y = np.asarray(self.values[-self.window :], dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.auto:
                self.auto = False
                fits = []
                for order in [(p, d, q) for d in (0, 1) for p in (0, 1, 2) for q in (0, 1, 2)]:
                    try:
                        fits.append((float(ARIMA(y, order=order).fit().aic), order))
                    except (ValueError, np.linalg.LinAlgError):
                        continue
                if fits:
                    self.order = min(f for f in fits if math.isfinite(f[0]))[1]
            return ARIMA(y, order=self.order).fit()

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last = self._values[-1]
        if self._seen < self.min_points or len(set(self.values[-self.window :])) == 1:
            # Too little (or constant) data: statsmodels would warn or mis-fit; last value is the right answer.
            return last, last + self.horizon_spread(horizon_s)
        new = self._seen - self._fitted_at
        if self._result is None or new >= self.refit_every:
            self._result = self._fit()
        elif new > 0:
            import warnings

            import numpy as np

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._result = self._result.append(np.asarray(self.values[-new:], dtype=float))
        self._fitted_at = self._seen
        k = max(1, self.horizon_steps(horizon_s))
        fc = self._result.get_forecast(steps=k)
        point = float(fc.predicted_mean[-1])
        se = float(fc.se_mean[-1])
        if not math.isfinite(se):
            se = 0.0
        return point, point + max(UPPER_Z * se, 0.0)
