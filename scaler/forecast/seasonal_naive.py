"""Seasonal naive: the value one season (default a day) before the target time; the baseline for daily cycles."""

from __future__ import annotations

import bisect
import math

from scaler.forecast.base import Forecaster


class SeasonalNaive(Forecaster):
    """x̂(t+h) = x(t+h−season), scaled by how today's level compares with the same time yesterday.

    Until one full season has been observed it answers the last value (a documented warm-up, not a failure).
    """

    name = "seasonal_naive"

    def __init__(self, *, season_s: float = 86_400.0, max_history: int = 20_000) -> None:
        super().__init__(max_history=max_history)
        if not (math.isfinite(season_s) and season_s > 0):
            raise ValueError(f"seasonal_naive: season_s must be > 0, got {season_s!r}")
        self.season_s = season_s
        self._keep = max_history
        self._st: list[float] = []
        self._sv: list[float] = []

    def _update(self, t: float, value: float) -> None:
        # Own flat lists: bisecting a deque is O(n) per probe, and this one holds a day of samples.
        self._st.append(t)
        self._sv.append(value)
        if len(self._st) > 2 * self._keep:
            del self._st[: -self._keep]
            del self._sv[: -self._keep]

    def _at(self, t: float) -> float | None:
        times = self._st
        if not times or t < times[0]:
            return None
        i = bisect.bisect_right(times, t) - 1
        return self._sv[i]

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        last_t, last = self._times[-1], self._values[-1]
        spread = self.horizon_spread(horizon_s)
        then = self._at(last_t + horizon_s - self.season_s)
        now_last_season = self._at(last_t - self.season_s)
        if then is None or now_last_season is None:
            return last, last + spread
        # Additive level correction keeps the seasonal shape but today's level.
        point = then + (last - now_last_season)
        return point, point + spread
