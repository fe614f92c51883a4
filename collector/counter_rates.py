"""A gateway's request counters, read tick by tick, into what the planner takes per deployment: ``arrival_rates``
(requests/s over the rate window, each series' resets taken out as Prometheus' ``rate`` takes them out) and
``arrivals_totals`` (the requests counted since the reading began, for the burst floor's short window).

One reader for every path that hands the planner a gateway's counter: `kvpilot run` with ``collector.arrivals``
(``kvpilot.runtime.arrivals.GatewayArrivals`` maps a PromQL answer's series to deployments and hands them here), and
`kvpilot backtest` and `kvpilot demo` with ``--arrivals gateway`` (the simulated router's counter as Prometheus scrapes
it, ``scaler.backtest.gateway``). Pure: the times given are the loop's (step-free) times of each reading.

A counter read through Prometheus moves once per scrape of the gateway (10 to 30 s), not once per tick: handed as it
moves, the burst floor would read each scrape's requests as a burst of one tick. Each step is therefore spread over the
time it took to build (the time since the series last moved, at most the rate window) in the totals; the rate is the
counter's increase over the window, where such steps average out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from collector.rates import counter_step

SeriesId = tuple[tuple[str, str], ...]

# No gateway series counts a million requests a second: a step past it is a corrupted or jumping counter (a 1e18 jump
# read as requests would ask for every replica the planner may give), not demand.
MAX_SERIES_RPS = 1e6


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One tick's reading: per deployment ("namespace/name") the gateway named."""

    rates: Mapping[str, float] = field(default_factory=dict)  # requests/s over the rate window
    totals: Mapping[str, float] = field(default_factory=dict)  # requests counted since kvpilot began reading


@dataclass(slots=True)
class _Counter:
    """One series' last reading, and the part of its last steps not yet handed to the totals."""

    value: float
    seen_at: float
    moved_at: float
    pending: float = 0.0
    release_rps: float = 0.0


class CounterRates:
    """Readings of counter series, each mapped to a deployment, into per-deployment rates and totals. Pure: the times
    given are the loop's (step-free) times of each reading.

    - A series read for the first time counts nothing (its count runs from the gateway's start, not ours); one whose
      value went down restarted, and counts its whole value, as Prometheus' ``rate`` counts a reset.
    - A deployment's rate is its series' increase over the newest reading at least ``window_s`` old (readings older
      than twice the window are dropped, so a rate never spans a long outage), once the readings span half the
      window: before that, or when it read nothing this tick, it has none and the planner keeps the engines' estimate.
    - Its total grows by each step spread over the time the step took to build, at most ``window_s``, handed over
      tick by tick (a series back after missed scrapes hands its requests over at their pace, not in one tick).
    - A step of more than ``MAX_SERIES_RPS`` requests/s counts nothing (``implausible`` lists it); the series is
      read from its new value on.
    - A series or deployment not read for twice the window is forgotten."""

    def __init__(self, window_s: float) -> None:
        if not 0 < window_s < math.inf:
            raise ValueError(f"window_s must be > 0 and finite, got {window_s}")
        self.window_s = window_s
        self._series: dict[SeriesId, _Counter] = {}
        self._points: dict[str, deque[tuple[float, float]]] = {}  # deployment -> (time, requests counted so far)
        self._counted: dict[str, float] = {}  # deployment -> requests counted since first read (resets taken out)
        self._totals: dict[str, float] = {}  # deployment -> requests handed to the totals so far
        self.implausible: list[tuple[SeriesId, float]] = []  # the last observe's refused steps: (series, requests)
        self._last_at: float | None = None  # the last observe's time
        self._read_last: set[str] = set()  # the deployments it read

    def observe(self, at: float, readings: Iterable[tuple[str, SeriesId, float]]) -> Arrivals:
        """One tick's readings, ``(deployment, series, value)``, at ``at``; what the planner is handed."""
        read: set[str] = set()
        self.implausible = []
        for key, series, value in readings:
            read.add(key)
            counted, released = self._step(at, series, value, stepped=key in self._read_last)
            self._counted[key] = self._counted.get(key, 0.0) + counted
            self._totals[key] = self._totals.get(key, 0.0) + released
        rates: dict[str, float] = {}
        for key in read:
            rate = self._rate(key, at)
            if rate is not None:
                rates[key] = rate
        self._forget(at, read)
        self._last_at, self._read_last = at, read
        return Arrivals(rates=rates, totals={key: self._totals[key] for key in read})

    def _step(self, at: float, series: SeriesId, value: float, *, stepped: bool) -> tuple[float, float]:
        """(requests this series counted since its last reading, requests handed to the totals now). ``stepped``:
        its deployment was read at the last observe, so the burst floor steps its totals from there to now."""
        c = self._series.get(series)
        if c is None:
            self._series[series] = _Counter(value, seen_at=at, moved_at=at)
            return 0.0, 0.0
        if at <= c.seen_at:
            return 0.0, 0.0  # read twice in one tick (a duplicate series): counted once
        counted = counter_step(c.value, value)
        elapsed = at - c.seen_at
        if counted > MAX_SERIES_RPS * max(elapsed, 1.0):
            self.implausible.append((series, counted))
            c.value, c.seen_at, c.moved_at = value, at, at  # read from its new value on
            return 0.0, 0.0
        if counted > 0:
            built_s = min(max(at - c.moved_at, elapsed), self.window_s)
            # this step at its own pace, what is still pending caught up over the window (a backlog neither handed
            # over at once nor kept behind for ever)
            c.release_rps = counted / built_s + c.pending / self.window_s
            c.pending += counted
            c.moved_at = at
        # handed over for the time since the last tick where its deployment was read then (the burst floor steps its
        # totals from there), not since this series was last read: a series back after missed scrapes while its
        # deployment's other series were read is no burst. A deployment not read then has no step for the burst
        # floor now: handed over for the time since this series was read, as the step's pace gives it
        tick_s = at - self._last_at if stepped and self._last_at is not None else elapsed
        released = min(c.pending, c.release_rps * min(elapsed, tick_s))
        c.pending -= released
        c.value, c.seen_at = value, at
        return counted, released

    def _rate(self, key: str, at: float) -> float | None:
        points = self._points.setdefault(key, deque())
        points.append((at, self._counted[key]))
        while points and at - points[0][0] > 2 * self.window_s:
            points.popleft()
        while len(points) > 2 and at - points[1][0] >= self.window_s:
            points.popleft()
        (t0, n0), (t1, n1) = points[0], points[-1]
        if t1 - t0 < self.window_s / 2:
            return None
        return (n1 - n0) / (t1 - t0)

    def _forget(self, at: float, read: set[str]) -> None:
        horizon = 2 * self.window_s
        for series in [s for s, c in self._series.items() if at - c.seen_at > horizon]:
            del self._series[series]
        for key in [k for k, p in self._points.items() if k not in read and (not p or at - p[-1][0] > horizon)]:
            del self._points[key]
            self._counted.pop(key, None)
            self._totals.pop(key, None)
