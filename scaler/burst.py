"""The recent peak of a deployment's arrival rate over a short window: what the burst floor of `scaler.policy` holds.

Arrivals per tick come from the gateway's request counter where the loop is given one (it counts requests queued
in front of a fleet at zero too), else from the counters every engine exports and the planner already reads
(requests finished, plus the change in requests waiting and running), summed over the replicas seen at both ends
of the tick (docs/scaling.md, "Policy").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable


class BurstPeak:
    """Requests/s over the last ``window_s``, and the highest such rate over the last ``hold_s``.

    ``update`` takes each replica's cumulative finished count and its requests in flight (waiting + running). A
    replica first seen after the first tick brings its counts in full (it joined empty, so all of it arrived since);
    a finished counter that went down is a restarted engine, also counted in full; a replica not reported is gone
    and leaves no step. The rate is None until one whole window has been seen.
    """

    def __init__(self, window_s: float, hold_s: float, slo_s: float = 0.0) -> None:
        if not (window_s > 0 and hold_s >= 0 and slo_s >= 0):
            raise ValueError(
                f"burst peak: window_s must be > 0, hold_s and slo_s >= 0, got {window_s}, {hold_s}, {slo_s}"
            )
        self.window_s = window_s
        self.hold_s = hold_s
        self.slo_s = slo_s
        self._last: dict[str, tuple[float, float]] = {}
        self._gateway: float | None = None
        self._first_t: float | None = None
        self._steps: deque[tuple[float, float, float]] = deque()  # (previous tick, t, arrivals since the previous)
        self._rates: deque[tuple[float, float]] = deque()  # (t, requests/s over the window ending at t)
        self._needs: deque[tuple[float, float]] = deque()  # (t, `service_need` of the window ending at t)
        self._prev_t: float | None = None

    def update(
        self,
        now: float,
        replicas: Iterable[tuple[str, float | None, float | None]],
        gateway_total: float | None = None,
    ) -> float | None:
        """Record one tick of ``(replica key, finished total, in flight)``, and of the gateway's cumulative request
        count where given (it wins once it has a previous tick to step from), and return the peak (requests/s)."""
        first_tick = self._first_t is None
        if first_tick:
            self._first_t = now
        from_replicas = self._replica_step(replicas, first_tick)
        from_gateway = self._gateway_step(gateway_total)
        if not first_tick and self._prev_t is not None:
            self._steps.append((self._prev_t, now, from_replicas if from_gateway is None else from_gateway))
        while self._steps and now - self._steps[0][1] >= self.window_s:
            self._steps.popleft()
        assert self._first_t is not None
        if now - self._first_t >= self.window_s:
            self._rates.append((now, max(0.0, sum(a for _, _, a in self._steps)) / self.window_s))
            self._needs.append((now, self._service_need(now)))
        while self._rates and now - self._rates[0][0] > self.hold_s:
            self._rates.popleft()
        while self._needs and now - self._needs[0][0] > self.hold_s:
            self._needs.popleft()
        self._prev_t = now
        return max((r for _, r in self._rates), default=None)

    def _service_need(self, now: float) -> float:
        """The least service rate (requests/s) under which no request of the window's arrivals waits more than
        ``slo_s``: a queue served at c from the start of any run of ticks ending now holds, at its end, the run's
        arrivals less c times its length, so the wait stays within S iff c ≥ A(d) / (d + S) for every run of d
        seconds (a rate-latency server's delay bound). The 30 s rate halves a 5 s burst of a 30 s window; this does
        not. Over the ticks of the window, each run ending at the latest tick."""
        need, arrived = 0.0, 0.0
        for start, _, a in reversed(self._steps):
            arrived += max(a, 0.0)
            span = now - start
            if span > 0:
                need = max(need, arrived / (span + self.slo_s))
        return need

    def need_since(self, t: float) -> float | None:
        """The highest `_service_need` of a window ending at or after ``t`` (None: none held)."""
        return max((n for at, n in self._needs if at >= t), default=None)

    def _replica_step(self, replicas: Iterable[tuple[str, float | None, float | None]], first_tick: bool) -> float:
        arrived, seen = 0.0, {}
        for key, finished, in_flight in replicas:
            if finished is None or in_flight is None or not (math.isfinite(finished) and math.isfinite(in_flight)):
                continue
            seen[key] = (finished, in_flight)
            before = self._last.get(key)
            if before is None:
                arrived += 0.0 if first_tick else finished + in_flight
            elif finished < before[0]:
                arrived += finished + in_flight
            else:
                arrived += finished - before[0] + in_flight - before[1]
        self._last = seen
        return arrived

    def _gateway_step(self, total: float | None) -> float | None:
        """Requests the gateway counted since its previous tick (a counter that went down restarted: in full); None
        without a previous count (a gateway's counter runs since its own start, not since ours)."""
        before, self._gateway = self._gateway, total if total is not None and math.isfinite(total) else None
        if before is None or self._gateway is None:
            return None
        return self._gateway if self._gateway < before else self._gateway - before


def burst_need(peak_rps: float, window_s: float, slo_ttft_s: float) -> float:
    """The service rate a burst at ``peak_rps`` lasting ``window_s`` needs for its last request to wait no more
    than the SLO: a queue built at (r − c) for B seconds drains at c, so its wait at the end, B·(r − c)/c, stays
    within S iff c ≥ r·B/(B + S)."""
    return peak_rps * window_s / (window_s + slo_ttft_s)
