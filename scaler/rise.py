"""How far a deployment's measured load has risen within a window: what a scale-down must still hold.

The HPA's scale-down window holds the highest need of the last 300 s whatever the traffic, against the load
returning before a released replica could be back; on smooth traffic the return it guards against is small, on
on/off traffic large. `LoadRise` measures it per deployment: for each tick, the largest rise of the load (replicas
at full capacity: arrivals plus the queue to drain, over what one replica serves) above that tick's own within the
next ``horizon_s`` (the planner passes the scale-down window), once that has passed. A release is safe where the
load now plus the rise exceeded in no more than the SLO's share of ticks still fits the replicas kept
(`Demand.release_replicas`, read by `ReplicaPolicy._stabilise`; the planner also keeps one replica spare for a loss).

Only loads read within a tick's horizon count for it: the planner skips a tick whose arrival rate or capacity is
unknown, so readings can stop for minutes, and the first one after such a gap lies past the horizons that ended in
it. A gap is missing evidence, not a rise (nor the absence of one): a tick whose horizon went unread for longer than
``gap_s`` (a tenth of the horizon, or twice the usual spacing of readings if longer) has an unknown rise and is
dropped, neither counted as the jump across the gap nor as 0; one whose horizon ended within ``gap_s`` of the last
reading before the gap closes with the peak it had, as it would between two ordinary readings. The margin then
reads the rises measured before the gap until new ones are measured."""

from __future__ import annotations

import math
from collections import deque

from scaler.forecast.sorted_window import SortedWindow

RISES = 400  # rises kept: as many as the forecast's residuals (scaler.forecast.ensemble), half an hour at 5 s ticks
GAP_SHARE = 0.1  # a horizon unread for longer than this share of it (30 s of 300 s: six 5 s ticks) is not measured
SPACINGS = 9  # the spacings of readings whose median is the usual one


class LoadRise:
    """The load's rise within ``horizon_s`` of each tick, measured once that has passed."""

    def __init__(self, horizon_s: float, maxlen: int = RISES) -> None:
        if not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ValueError(f"load rise: horizon_s must be > 0, got {horizon_s!r}")
        self.horizon_s = horizon_s
        self._open: deque[list[float]] = deque()  # [tick, load then, highest load since]
        self._last: float | None = None  # when the last load was read
        self._spacings: deque[float] = deque(maxlen=SPACINGS)
        self.rises = SortedWindow(maxlen=maxlen)

    def gap_s(self) -> float:
        """The longest a horizon may go unread and still be measured: a tenth of it, or twice the (lower) median
        spacing of the last readings if longer (ticks far apart against the horizon are each read, not a gap)."""
        usual = sorted(self._spacings)[(len(self._spacings) - 1) // 2] if self._spacings else 0.0
        return max(GAP_SHARE * self.horizon_s, 2.0 * usual)

    def observe(self, now: float, load: float | None) -> None:
        """One tick's load (None or non-finite: not measured, skipped)."""
        if load is None or not math.isfinite(load):
            return
        last = self._last
        if last is not None and now <= last:
            return  # time must move forward
        if last is not None:
            self._spacings.append(now - last)  # with this one: the first readings' spacing is usual, not a gap
            gap_s = self.gap_s()
            still: deque[list[float]] = deque()
            for tick in self._open:  # each opened at or before `last`: its horizon (tick, tick + h] reaches past it
                t, start, peak = tick
                end = t + self.horizon_s
                if min(end, now) - last > gap_s:
                    continue  # its horizon went unread too long: its rise is unknown
                if end < now:
                    self.rises.append(peak - start)  # its horizon ended before this reading: closed as it stood
                    continue
                tick[2] = max(peak, load)
                if end <= now:
                    self.rises.append(tick[2] - start)
                else:
                    still.append(tick)
            self._open = still
        self._open.append([now, load, load])
        self._last = now

    def margin(self, share: float) -> float | None:
        """The rise exceeded in no more than ``share`` of the measured ticks (≥ 0); None while fewer than 1/share
        are measured (a quantile of fewer is the largest one seen, not a share)."""
        n = len(self.rises)
        if not 0 < share < 1 or n < math.ceil(1.0 / share):
            return None
        return max(self.rises[int((1.0 - share) * (n - 1))], 0.0)
