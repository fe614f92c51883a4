"""A deployment's request and token rates over one window common to all its replicas: Prometheus'
``sum(increase(c[W])) / W`` rather than ``sum(rate(c[W]))``.

Summing each replica's rate over its own window overshoots when a replica joins (the old replicas' windows still
hold their share from before it, the new one reports its share now from seconds of history) and dips when one
leaves (its share vanishes at once while the others' windows still lag): 40 req/s read as 50 for a minute after a
third replica joined. Here every counter step of every replica is added, as it arrives, to one running total per
deployment, recorded at each tick on step-free time with the requests in flight on its ready replicas; a rate is the
total's increase over the window (interpolated at its start) divided by the window. A replica that joins adds from
its first sample on (that sample is its baseline, whatever its counter reads: a restart or a target found late is
not an increase); a departed one's steps stay in the total until they leave the window; a restart counts the new
value in full (``collector.rates.counter_step``); a step across a scrape gap is spread evenly over the ticks it
missed, so the part of it before the window's start stays out.
"""

from __future__ import annotations

import math
from collections import deque

COUNTERS = (
    "requests_finished",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_hits",
    "prefix_queries",
)
_N = len(COUNTERS)
FINISHED, PROMPT, GENERATION, PREEMPTIONS, HITS, QUERIES = range(_N)


class _Point:
    __slots__ = ("in_flight", "reported", "t", "totals")

    def __init__(self, t: float, totals: list[float], reported: list[int], in_flight: float | None) -> None:
        self.t = t
        self.totals = totals  # per counter: every step credited up to t, summed over the deployment's replicas
        self.reported = reported  # per counter: how many steps were credited up to t (0: no replica exports it)
        self.in_flight = in_flight  # requests waiting + running on the ready replicas at t (None: none exports it)


class DeploymentWindow:
    """One deployment's running totals at each tick, the window's worth and the point just before it."""

    __slots__ = ("_pending", "_pending_reported", "_points")

    def __init__(self) -> None:
        self._points: deque[_Point] = deque()
        self._pending = [0.0] * _N  # steps credited this tick, not yet in a point
        self._pending_reported = [0] * _N

    def credit(self, steps: list[float | None], since: float | None, now: float) -> None:
        """A replica's counter steps from its previous sample (taken at tick ``since``, step-free time) to this
        tick's ``now``; None for a counter without a step (not exported, or this is its first value). A step across
        ticks the replica missed is spread over them in proportion to time, as if it had been scraped at each."""
        points = self._points
        pending, reported = self._pending, self._pending_reported
        if since is None or not points or points[-1].t <= since or now <= since:  # nearly always: no tick missed
            for i, step in enumerate(steps):
                if step is not None:
                    pending[i] += step
                    reported[i] += 1
            return
        for i, step in enumerate(steps):
            if step is None:
                continue
            reported[i] += 1
            # The points after `since` already hold what the other replicas did then: each gets this replica's share
            # of the step accrued by its time (they are running totals), and this tick's point the rest.
            span = now - since
            for p in reversed(points):
                if p.t <= since:
                    break
                p.totals[i] += step * (p.t - since) / span
            pending[i] += step * (now - points[-1].t) / span

    def close(self, now: float, in_flight: float | None, window_s: float, clock_slack_s: float) -> None:
        """Record this tick's point at ``now`` (step-free time) and forget points older than the window, but the
        last one before it (the window's start is interpolated). A ``now`` at or before the last point's time (a
        tick observed twice) folds into that point; one more than ``clock_slack_s`` before it starts afresh."""
        points = self._points
        if points and now <= points[-1].t:
            last = points[-1]
            if now < last.t - clock_slack_s:
                points.clear()
            else:
                for i in range(_N):
                    last.totals[i] += self._pending[i]
                    last.reported[i] += self._pending_reported[i]
                last.in_flight = in_flight
                self._pending = [0.0] * _N
                self._pending_reported = [0] * _N
                return
        if points:
            before = points[-1]
            totals = [a + b for a, b in zip(before.totals, self._pending, strict=True)]
            reported = [a + b for a, b in zip(before.reported, self._pending_reported, strict=True)]
        else:
            totals, reported = [0.0] * _N, [0] * _N
        points.append(_Point(now, totals, reported, in_flight))
        self._pending = [0.0] * _N
        self._pending_reported = [0] * _N
        start = now - window_s
        while len(points) > 1 and points[1].t <= start:
            points.popleft()

    def rates(self, window_s: float) -> tuple[list[float | None], list[float | None], float | None, float | None]:
        """Per counter: the increase over the window and the rate (None where no replica credited a step in it);
        then the requests-in-flight slope over the same window (None where unknown at either end) and the window
        actually covered in seconds (less than ``window_s`` while the deployment is younger; None with one point)."""
        points = self._points
        unknown: list[float | None] = [None] * _N
        if len(points) < 2:
            return unknown, list(unknown), None, None
        last = points[-1]
        start = last.t - window_s
        first = points[0]
        if first.t >= start:
            base_totals: list[float] = first.totals
            base_flight = first.in_flight
            begin = first.t
        else:  # interpolate the running totals (and the requests in flight) at the window's start
            after = points[1]
            frac = (start - first.t) / (after.t - first.t)
            base_totals = [a + frac * (b - a) for a, b in zip(first.totals, after.totals, strict=True)]
            base_flight = (
                None
                if first.in_flight is None or after.in_flight is None
                else first.in_flight + frac * (after.in_flight - first.in_flight)
            )
            begin = start
        span = last.t - begin
        if not span > 0:
            return unknown, list(unknown), None, None
        increases: list[float | None] = []
        per_second: list[float | None] = []
        for i in range(_N):
            if last.reported[i] - first.reported[i] <= 0:
                increases.append(None)
                per_second.append(None)
                continue
            inc = max(0.0, last.totals[i] - base_totals[i])
            rate = inc / span
            known = math.isfinite(rate)
            increases.append(inc if known else None)
            per_second.append(rate if known else None)
        slope = None
        if base_flight is not None and last.in_flight is not None:
            s = (last.in_flight - base_flight) / span
            slope = s if math.isfinite(s) else None
        return increases, per_second, slope, span
