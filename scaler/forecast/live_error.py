"""The live forecast error at the scaling horizon, as MASE against the last-value forecast.

Each tick records the forecast for `now + horizon` and the value seen now; once the horizon has passed, the
forecast is scored against what was then observed, and so is the naive forecast "it stays where it was". MASE is
the ratio of their summed absolute errors over a trailing window: below 1 the forecaster beats doing nothing
predictive, which is the question an operator asks of it. Pure: time comes in as an argument.
"""

from __future__ import annotations

import math
from collections import deque

# A kept sum is summed afresh when it falls under this share of its peak: each of the window's ~720 additions and
# removals rounds by ~1e-16 of the peak, so what is read stays within ~1e-10 of the sum worked out afresh.
_CANCELLED = 1e-3


class LiveMase:
    def __init__(self, horizon_s: float, *, window_s: float = 3600.0, min_scored: int = 12) -> None:
        if not horizon_s > 0:
            raise ValueError(f"live MASE: horizon_s must be > 0, got {horizon_s}")
        self.horizon_s = horizon_s
        self.window_s = window_s
        self.min_scored = min_scored
        self._pending: deque[tuple[float, float, float]] = deque()  # (due at, forecast, value when forecast)
        self._scored: deque[tuple[float, float, float]] = deque()  # (scored at, |model error|, |naive error|)
        # Their sums, kept as scores come and go (an hour's window is ~720 scores a deployment, read every tick);
        # summed afresh once the window has turned over or they cancel (below), so rounding cannot accumulate.
        self._model_sum = 0.0
        self._naive_sum = 0.0
        self._dropped = 0
        self._peaks = (0.0, 0.0)  # the largest each sum reached since it was last summed afresh (rounding's scale)
        self._naive_moved = 0  # scores whose naive error is not 0: none, and demand never moved (exactly)

    def record(self, now: float, actual: float | None, forecast: float | None) -> None:
        """The value observed at `now`, and the forecast made now for `now + horizon_s` (either may be unknown)."""
        if actual is None or not math.isfinite(actual):
            return
        while self._pending and self._pending[0][0] <= now:
            _, predicted, then = self._pending.popleft()
            model, naive = abs(predicted - actual), abs(then - actual)
            self._scored.append((now, model, naive))
            self._model_sum += model
            self._naive_sum += naive
            self._naive_moved += naive > 0
        self._peaks = (max(self._peaks[0], self._model_sum), max(self._peaks[1], self._naive_sum))
        while self._scored and self._scored[0][0] < now - self.window_s:
            _, model, naive = self._scored.popleft()
            self._model_sum -= model
            self._naive_sum -= naive
            self._naive_moved -= naive > 0
            self._dropped += 1
        # Summed afresh once the window has turned over, and whenever what is left is small beside what came and
        # went (1 + 1e-20 - 1 is 0 when kept, 1e-20 summed afresh).
        cancelled = self._model_sum < _CANCELLED * self._peaks[0] or self._naive_sum < _CANCELLED * self._peaks[1]
        if self._dropped and (self._dropped >= len(self._scored) or cancelled):
            self._model_sum = math.fsum(s[1] for s in self._scored)
            self._naive_sum = math.fsum(s[2] for s in self._scored)
            self._dropped, self._peaks = 0, (self._model_sum, self._naive_sum)
        if forecast is not None and math.isfinite(forecast):
            self._pending.append((now + self.horizon_s, forecast, actual))

    def value(self) -> float | None:
        """MASE over the window; None until enough forecasts were scored, or when demand never moved."""
        if len(self._scored) < self.min_scored:
            return None
        if not self._naive_moved or self._naive_sum <= 0:
            return None
        return self._model_sum / self._naive_sum
