"""The live forecast error at the scaling horizon, as MASE against the last-value forecast.

Each tick records the forecast for `now + horizon` and the value seen now; once the horizon has passed, the
forecast is scored against what was then observed, and so is the naive forecast "it stays where it was". MASE is
the ratio of their summed absolute errors over a trailing window: below 1 the forecaster beats doing nothing
predictive, which is the question an operator asks of it. Pure: time comes in as an argument.
"""

from __future__ import annotations

import math
from collections import deque


class LiveMase:
    def __init__(self, horizon_s: float, *, window_s: float = 3600.0, min_scored: int = 12) -> None:
        if not horizon_s > 0:
            raise ValueError(f"live MASE: horizon_s must be > 0, got {horizon_s}")
        self.horizon_s = horizon_s
        self.window_s = window_s
        self.min_scored = min_scored
        self._pending: deque[tuple[float, float, float]] = deque()  # (due at, forecast, value when forecast)
        self._scored: deque[tuple[float, float, float]] = deque()  # (scored at, |model error|, |naive error|)

    def record(self, now: float, actual: float | None, forecast: float | None) -> None:
        """The value observed at `now`, and the forecast made now for `now + horizon_s` (either may be unknown)."""
        if actual is None or not math.isfinite(actual):
            return
        while self._pending and self._pending[0][0] <= now:
            _, predicted, then = self._pending.popleft()
            self._scored.append((now, abs(predicted - actual), abs(then - actual)))
        while self._scored and self._scored[0][0] < now - self.window_s:
            self._scored.popleft()
        if forecast is not None and math.isfinite(forecast):
            self._pending.append((now + self.horizon_s, forecast, actual))

    def value(self) -> float | None:
        """MASE over the window; None until enough forecasts were scored, or when demand never moved."""
        if len(self._scored) < self.min_scored:
            return None
        naive = sum(s[2] for s in self._scored)
        if naive <= 0:
            return None
        return sum(s[1] for s in self._scored) / naive
