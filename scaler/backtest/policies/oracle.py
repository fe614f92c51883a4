"""`oracle`: perfect foresight. Knows the trace's future arrival rate (as a 30 s moving average: shorter
would chase Poisson noise, longer would hide real bursts) and keeps exactly the replicas that every moment
until a new replica could be ready (now … now + cold start + one window) needs at the profiled capacity:
about the least a scaler that cannot beat physics (cold starts) could spend for the same SLO."""

from __future__ import annotations

import bisect

from scaler.backtest.observe import History
from scaler.backtest.policies.base import Context, ForecastPoint, Policy, ceil_div

WINDOW_S = 30.0


class Oracle(Policy):
    name = "oracle"
    interval_s = 5.0

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        times, rates = ctx.future_rate
        if not times:
            raise ValueError("oracle: the backtest context carries no future arrival rate")
        # Centre a WINDOW_S moving average on each bin.
        k = max(1, round(WINDOW_S / ctx.bin_s))
        smoothed = [sum(rates[max(0, i - k // 2) : i - k // 2 + k]) / k for i in range(len(rates))]
        self.times, self.rates = list(times), smoothed

    def _peak(self, start: float, end: float) -> float:
        lo = max(0, bisect.bisect_right(self.times, start) - 1)
        hi = bisect.bisect_right(self.times, end)
        return max(self.rates[lo:hi], default=0.0)

    def decide(self, history: History, now: float) -> int:
        horizon = self.ctx.cold_start_s + WINDOW_S
        peak = self._peak(now, now + horizon)
        self.forecasts.append(ForecastPoint(now, horizon, peak, peak))
        return self.ctx.clamp(ceil_div(peak, self.ctx.capacity_rps))
