"""Counters and cumulative histograms turned into windowed increases and rates, reset-aware.

Pure functions over points ``(t, value)`` given oldest first. A counter that goes down has restarted
(the engine process restarted): as Prometheus' ``increase()`` does, the post-reset value counts as the
increase over that step, so a restart never produces a negative rate. Unlike Prometheus we do not
extrapolate to the window's edges: the rate is the increase divided by the time actually covered, which
is what a controller comparing two ticks wants. Too few points gives ``None`` (unknown), never 0.

What a restart is, and what a step across one adds, is decided here once: `counter_step` for counters,
`histogram_reset` and `histogram_step` for histograms; the planner's and the backtest's windows use them too.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable, Sequence

from collector import validity
from collector.samples import Histogram

Point = tuple[float, float]
"""``(t seconds, value)``."""


def finite_points(points: Iterable[tuple[float, float | None]]) -> list[Point]:
    """Keep the points whose value is known and finite (a missing counter is skipped, not taken as 0)."""
    return [(t, v) for t, v in points if v is not None and math.isfinite(v) and math.isfinite(t)]


def counter_points(points: Iterable[tuple[float, float | None]]) -> list[Point]:
    """`finite_points` for counters: a negative value cannot come from a counter, so it is garbage
    (unknown), not a reset to take at face value."""
    return [(t, v) for t, v in finite_points(points) if v >= 0]


def counter_step(previous: float, current: float) -> float:
    """A counter's increase from one sample to the next. A fall is a restart: the counter started again from 0,
    so all of ``current`` is new (Prometheus' ``increase()``)."""
    return current - previous if current >= previous else current


def increase(points: Sequence[Point]) -> float | None:
    """Total increase of a counter over ``points`` (oldest first); ``None`` with fewer than two points."""
    if len(points) < 2:
        return None
    total = 0.0
    previous = points[0][1]
    for _, value in points[1:]:
        total += counter_step(previous, value)
        previous = value
    return total


def rate(points: Sequence[Point]) -> float | None:
    """Per-second increase over the time ``points`` span; ``None`` when unknown (fewer than two points,
    or no time elapsed between the first and the last)."""
    inc = increase(points)
    if inc is None:
        return None
    elapsed = points[-1][0] - points[0][0]
    if elapsed <= 0:
        return None
    return _finite(inc / elapsed)


def derivative(points: Sequence[Point]) -> float | None:
    """Slope of a gauge between the first and the last point (``deriv``-like, two-point); ``None`` when
    unknown."""
    if len(points) < 2:
        return None
    elapsed = points[-1][0] - points[0][0]
    if elapsed <= 0:
        return None
    return _finite((points[-1][1] - points[0][1]) / elapsed)


_INF = math.inf


def _finite(per_second: float) -> float | None:
    """``per_second``, or ``None`` where it left float's range: values near its limit (a garbage page) over a short
    span divide to ``inf``, which is no rate to plan on."""
    return per_second if -_INF < per_second < _INF else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, ``None`` when either is unknown or the denominator is 0 (no traffic
    means no hit ratio, not a hit ratio of 0)."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def histogram_reset(previous: Histogram, current: Histogram) -> bool:
    """Whether a cumulative histogram restarted between two samples with the same bounds: its count or any of its
    buckets fell.

    While the process lives every bucket and the count only grow, so a fall in any of them proves a restart. The
    count (+Inf) alone is not enough: by the next scrape a restarted process can have seen more observations in all
    than the old one had (the old one ran briefly, or traffic rose) while a lower bucket is still below its old
    value; subtracting there gives that bucket a negative increase. Prometheus decides the same for native histograms
    (``DetectReset``: the count or any bucket smaller; never the sum, which negative observations may lower). PromQL
    on classic histograms sees each bucket as a counter of its own and resets each alone; a restart zeroes all
    buckets at once, so that would take the buckets that fell in full and subtract the others, undercounting the
    step.
    """
    return current.count < previous.count or any(map(operator.lt, current.counts, previous.counts))


def histogram_step(previous: Histogram, current: Histogram) -> Histogram | None:
    """A cumulative histogram's bucket-wise increase from one sample to the next, reset-aware: after a restart
    (`histogram_reset`) all of ``current`` is new, as a counter's value is (`counter_step`). ``None`` when the
    bounds differ: buckets that appeared or disappeared cannot be subtracted."""
    return _step(previous, current) if current.bounds == previous.bounds else None


def _step(previous: Histogram, current: Histogram) -> Histogram:
    """`histogram_step` of two histograms known to share their bounds."""
    if histogram_reset(previous, current):
        return current
    return Histogram(
        bounds=current.bounds,
        counts=tuple(map(operator.sub, current.counts, previous.counts)),
        sum=current.sum - previous.sum,
        count=current.count - previous.count,
    )


def histogram_increase(histograms: Sequence[Histogram]) -> Histogram | None:
    """Bucket-wise increase of a cumulative histogram over a window (oldest first): the sum of its `histogram_step`s.

    A histogram with an impossible count (NaN, infinite, negative, buckets not cumulative: see
    `collector.validity.histogram`) is no sample and is skipped, as `counter_points` skips such counter values.
    Buckets that changed their bounds mid-window cannot be subtracted: the window then starts at the change. ``None``
    with fewer than two comparable histograms.
    """
    usable = [h for h in histograms if validity.histogram(h) is not None]
    if len(usable) < 2:
        return None
    bounds = usable[-1].bounds
    start = len(usable) - 1
    while start > 0 and usable[start - 1].bounds == bounds:
        start -= 1
    window = usable[start:]
    if len(window) < 2:
        return None
    counts = [0.0] * len(bounds)
    total_sum = 0.0
    total_count = 0.0
    for previous, current in itertools.pairwise(window):
        step = _step(previous, current)
        for i, c in enumerate(step.counts):
            counts[i] += c
        total_sum += step.sum
        total_count += step.count
    return Histogram(bounds=bounds, counts=tuple(counts), sum=total_sum, count=total_count)


def histogram_add(histograms: Iterable[Histogram | None]) -> Histogram | None:
    """Sum histograms that share the first one's bounds (deployment aggregation). Histograms with other
    bounds cannot be added bucket-wise and are left out; ``None`` when there is nothing to add."""
    first: Histogram | None = None
    counts: list[float] = []
    total_sum = total_count = 0.0
    added = False
    for h in histograms:
        if h is None:
            continue
        if first is None:
            first = h
            counts, total_sum, total_count = list(h.counts), h.sum, h.count
        elif h.bounds is first.bounds or h.bounds == first.bounds:
            # One running sum, one histogram at the end (a deployment's window adds a thousand replicas' ones).
            counts = list(map(operator.add, counts, h.counts))  # equal bounds: equal lengths
            total_sum += h.sum
            total_count += h.count
            added = True
    if first is None or not added:
        return first
    return Histogram(bounds=first.bounds, counts=tuple(counts), sum=total_sum, count=total_count)


def histogram_quantile(q: float, histogram: Histogram | None) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding rank ``q``.

    ``None`` when the histogram is unknown or empty. A quantile that falls in the +Inf bucket returns the
    highest finite bound (as Prometheus does)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if histogram is None or not histogram.bounds:
        return None
    total = histogram.counts[-1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound = 0.0
    lower_count = 0.0
    for bound, count in zip(histogram.bounds, histogram.counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower_bound if len(histogram.bounds) > 1 else None
            if count == lower_count:
                return bound
            if lower_bound == 0.0 and bound <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None


# -- windows kept up to date point by point ----------------------------------------------------------------------
#
# The increase of a counter over a window is a telescoping sum: the steps between points cancel except at
# restarts, so it is the last value minus the first plus, at each restart inside the window, the value just
# before it (the step there counts the post-restart value in full, as `increase` does), and, where a counter was
# read anew after a jump no replica makes, the jump taken off again (it counts nothing). Kept so, a window costs
# O(1) per point added and per read while no restart is inside it, instead of a pass over every point on every
# tick; `tests/unit/collector/test_rates.py` checks it against `increase`, `rate`, `derivative` and
# `histogram_increase` on the same points.


class CounterWindow:
    """A counter's valid points (see `counter_points`) since a start time, with `increase` and `rate` over them.

    ``max_per_s`` (``collector.validity.MAX_COUNTER_PER_S``): a reading whose step from the last valid one is more
    than this per second (at least a second's worth) is no step a replica makes: a corrupted counter (one page read at
    9e15 asked for every replica the planner may give, for the rate window, and the minute's roll-up kept the rate)
    or another process behind the URL. It is held unread, as an invalid value is; a next reading stepping plausibly
    from the last valid value is read from there (the jump was a glitch), one stepping plausibly from the held reading
    is read from the held one on, its jump counting nothing (the counter moved)."""

    __slots__ = ("_held", "_last", "_last_t", "_points", "_restarts", "max_per_s")

    def __init__(self, max_per_s: float = math.inf) -> None:
        # (t, value, what the increase adds at this point: the previous point's value at a restart, the jump taken
        # off where the counter was read anew, else None)
        self._points: deque[tuple[float, float, float | None]] = deque()
        self._restarts = 0  # points in the deque that add to the increase (restarts, readings anew)
        self._last: float | None = None  # the previous valid value, even once it has left the window
        self._last_t = -math.inf  # ... and its time
        self._held: tuple[float, float] | None = None  # a reading past max_per_s from the last valid one: (t, value)
        self.max_per_s = max_per_s

    def add(self, t: float, value: float | None) -> float | None:
        """Take a point; return the counter's step from the previous valid value (`counter_step`), None for the
        first valid value or an invalid one (the deployment's window, ``collector.deployment_window``, adds them)."""
        if value is None or not (math.isfinite(value) and math.isfinite(t)) or value < 0:
            return None
        before = self._last
        if before is None:
            self._points.append((t, value, None))
            self._last, self._last_t = value, t
            return None
        step = value - before if value >= before else value  # counter_step, inline: every counter of every replica
        # past max_per_s over at least a second: compared with the limit alone first, as nearly every step is below it
        if step > self.max_per_s and step > self.max_per_s * (t - self._last_t):
            held = self._held
            if held is None or not self._plausible(held[1], held[0], t, value):
                self._held = (t, value)
                return None
            # a second reading agrees with the held one: the counter moved; read from the held reading on
            self._restarts += 1
            self._points.append((held[0], held[1], before - held[1]))
            before = held[1]
            step = counter_step(before, value)
        if self._held is not None:  # a glitch: the reading held is dropped
            self._held = None
        restart = before if value < before else None
        self._restarts += restart is not None
        self._points.append((t, value, restart))
        self._last, self._last_t = value, t
        return step

    def _plausible(self, before: float, before_t: float, t: float, value: float) -> bool:
        return counter_step(before, value) <= self.max_per_s * max(t - before_t, 1.0)

    def continue_from(self, before: CounterWindow) -> None:
        """Take the steps of a window started afresh from ``before``'s last value (the rates start again here; the
        steps ``add`` returns do not)."""
        self._last, self._last_t, self._held = before._last, before._last_t, before._held

    def trim(self, start: float) -> None:
        """Forget the points before ``start``."""
        points = self._points
        while points and points[0][0] < start:
            self._restarts -= points.popleft()[2] is not None

    def increase(self) -> float | None:
        points = self._points
        if len(points) < 2:
            return None
        total = points[-1][1] - points[0][1]
        restarts = self._restarts - (points[0][2] is not None)  # the first point's step lies outside
        if restarts:
            try:
                total += math.fsum(before for _, _, before in itertools.islice(points, 1, None) if before is not None)
            except OverflowError:  # restarts from counters near float's limit (a garbage page): no increase to read
                return None
            if not math.isfinite(total):
                return None
            # a jump taken off was rounded apart from the values it joins: a hair below 0 where the steps add to 0
            total = max(total, 0.0)
        return total

    def rate(self) -> float | None:
        return self.increase_and_rate()[1]

    def increase_and_rate(self) -> tuple[float | None, float | None]:
        """``(self.increase(), self.rate())``, the increase worked out once (a replica's view reads both of a counter,
        or only the rate of most, for every replica every tick)."""
        total = self.increase()
        if total is None:
            return None, None
        elapsed = self._points[-1][0] - self._points[0][0]
        if elapsed <= 0:
            return total, None
        per_second = total / elapsed  # >= 0; inf past float's range (`_finite`, inline: every counter of every replica)
        return total, (per_second if per_second < _INF else None)


class GaugeWindow:
    """A gauge's finite points since a start time, with the two-point `derivative` over them."""

    __slots__ = ("_points",)

    def __init__(self) -> None:
        self._points: deque[Point] = deque()

    def add(self, t: float, value: float | None) -> None:
        if value is not None and math.isfinite(value) and math.isfinite(t):
            self._points.append((t, value))

    def trim(self, start: float) -> None:
        points = self._points
        while points and points[0][0] < start:
            points.popleft()

    def derivative(self) -> float | None:
        return derivative(self._points) if len(self._points) >= 2 else None


class HistogramWindow:
    """A cumulative histogram's possible points since a start time (those with the newest bounds), with
    `histogram_increase` over them."""

    __slots__ = ("_points", "_restarts")

    def __init__(self) -> None:
        # (t, histogram, the previous histogram when this one is a restart, else None)
        self._points: deque[tuple[float, Histogram, Histogram | None]] = deque()
        self._restarts = 0

    def add(self, t: float, histogram: Histogram | None) -> None:
        if histogram is None or validity.histogram(histogram) is None:
            return
        points = self._points
        restart = None
        if points:
            previous = points[-1][1]
            if previous.bounds != histogram.bounds:  # incomparable: the window starts again here
                points.clear()
                self._restarts = 0
            elif histogram_reset(previous, histogram):
                restart = previous
                self._restarts += 1
        points.append((t, histogram, restart))

    def trim(self, start: float) -> None:
        points = self._points
        while points and points[0][0] < start:
            self._restarts -= points.popleft()[2] is not None

    def increase(self) -> Histogram | None:
        points = self._points
        if len(points) < 2:
            return None
        first, last = points[0][1], points[-1][1]
        if not self._restarts - (points[0][2] is not None):  # nearly always: last minus first, one tuple built
            return Histogram(
                last.bounds,
                tuple(map(operator.sub, last.counts, first.counts)),
                last.sum - first.sum,
                last.count - first.count,
            )
        counts = list(map(operator.sub, last.counts, first.counts))
        total_sum, total_count = last.sum - first.sum, last.count - first.count
        for _, _, before in itertools.islice(points, 1, None):
            if before is not None:
                counts = list(map(operator.add, counts, before.counts))
                total_sum += before.sum
                total_count += before.count
        return Histogram(bounds=last.bounds, counts=tuple(counts), sum=total_sum, count=total_count)
