"""How far a deployment's measured load has risen within a window: what a scale-down must still hold.

The HPA's scale-down window holds the highest need of the last 300 s whatever the traffic, against the load
returning before a released replica could be back; on smooth traffic the return it guards against is small, on
on/off traffic large. `LoadRise` measures it per deployment: for each tick, the largest rise of the load (replicas
at full capacity: arrivals plus the queue to drain, over what one replica serves) above that tick's own within the
next ``horizon_s`` (the planner passes the scale-down window), once that has passed. A release is safe where the
load now plus the rise exceeded in no more than the SLO's share of ticks still fits the replicas kept
(`Demand.release_replicas`, read by `ReplicaPolicy._stabilise`; the planner also keeps one replica spare for a loss)."""

from __future__ import annotations

import math
from collections import deque

from scaler.forecast.sorted_window import SortedWindow

RISES = 400  # rises kept: as many as the forecast's residuals (scaler.forecast.ensemble), half an hour at 5 s ticks


class LoadRise:
    """The load's rise within ``horizon_s`` of each tick, measured once that has passed."""

    def __init__(self, horizon_s: float, maxlen: int = RISES) -> None:
        if not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ValueError(f"load rise: horizon_s must be > 0, got {horizon_s!r}")
        self.horizon_s = horizon_s
        self._open: deque[list[float]] = deque()  # [tick, load then, highest load since]
        self.rises = SortedWindow(maxlen=maxlen)

    def observe(self, now: float, load: float | None) -> None:
        """One tick's load (None or non-finite: not measured, skipped)."""
        if load is None or not math.isfinite(load):
            return
        if self._open and now <= self._open[-1][0]:
            return  # time must move forward
        for tick in self._open:
            tick[2] = max(tick[2], load)
        while self._open and now - self._open[0][0] >= self.horizon_s:
            _, start, peak = self._open.popleft()
            self.rises.append(peak - start)
        self._open.append([now, load, load])

    def margin(self, share: float) -> float | None:
        """The rise exceeded in no more than ``share`` of the measured ticks (≥ 0); None while fewer than 1/share
        are measured (a quantile of fewer is the largest one seen, not a share)."""
        n = len(self.rises)
        if not 0 < share < 1 or n < math.ceil(1.0 / share):
            return None
        return max(self.rises[int((1.0 - share) * (n - 1))], 0.0)
