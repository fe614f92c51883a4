"""The Theil-Sen trend of a replica's KV usage over a recent window, as the KV detector and the exported projection
read it every tick.

Its cost is bounded by the window, never by the history kept (an hour): the window's samples are found by bisection
on the history's times, and with a ``KvTrends`` (one per fleet state, held across ticks) a replica's trend is worked
out once per tick however often it is asked for.
"""

from __future__ import annotations

import operator
import statistics
from bisect import bisect_left
from collections.abc import Collection, Iterable, Sequence
from itertools import repeat
from operator import add, mul, sub, truediv

from collector.samples import ReplicaSample
from collector.state import replica_key
from collector.validity import fraction

Trend = tuple[float, float]  # (slope per second, fitted usage at the latest sample)

_timestamp = operator.attrgetter("timestamp")

# The most points a trend is fitted from: a window of more (a tick much shorter than the window's 60 s / 12 points at
# the default 5 s) is thinned to every k-th sample back from the latest, so the pairs stay ~2,000 however short the
# tick (collector.interval_s 0.05 put 1,200 points, 720,000 pairs, in each replica's window every tick).
MAX_TREND_POINTS = 64


def thinned(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``points`` (oldest first), or where there are more than ``MAX_TREND_POINTS`` every k-th back from the latest,
    at most that many: what a Theil-Sen fit reads."""
    if len(points) <= MAX_TREND_POINTS:
        return points
    step = -(-len(points) // MAX_TREND_POINTS)  # ceil
    return points[::-step][::-1]


def fit_trend(history: Sequence[ReplicaSample], window_s: float, min_samples: int) -> Trend | None:
    """Theil-Sen (slope per second, fitted usage at the latest sample) of kv_usage over the last ``window_s`` of
    ``history``; None with fewer than ``min_samples`` points. The median of pairwise slopes ignores a noisy scrape
    or two (least squares would let one spike at the window's end set the slope), and the fitted level, not the
    last raw value, is what is projected. O(n^2) pairs over the window's ~12-24 samples; a window of more than
    ``MAX_TREND_POINTS`` is fitted from every k-th sample back from the latest, at most that many."""
    start = history[-1].timestamp - window_s
    return _fit([p for s in history if (p := _point(s, start)) is not None], min_samples)


def _point(s: ReplicaSample, start: float) -> tuple[float, float] | None:
    """A sample's (time, usage) as a trend over a window from ``start`` reads it; None where it reads none."""
    # `fraction` of each usage, called only where it could change one: a usage strictly inside (0, 1) is its own
    # `fraction` (the same object), and nearly every sample's is, so the call is skipped for those.
    if s.timestamp >= start and (v := s.kv_usage) is not None and (0.0 < v < 1.0 or (v := fraction(v)) is not None):
        return s.timestamp, v
    return None


def _slopes(pts: list[tuple[float, float]]) -> list[float]:
    """The pairwise slopes of ``pts``, each pair (earlier, later in the list) whose later point is later in time."""
    return [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :] if t2 > t1]


def _fit(pts: list[tuple[float, float]], min_samples: int) -> Trend | None:
    if len(pts) < min_samples:
        return None
    pts = thinned(pts)
    slopes = _slopes(pts)
    if not slopes:
        return None
    return _fitted(pts, statistics.median(slopes))


def _fitted(pts: list[tuple[float, float]], slope: float) -> Trend:
    t_last = pts[-1][0]
    return slope, statistics.median(v + slope * (t_last - t) for t, v in pts)


class _Window:
    """One replica's trend window as ``KvTrends`` slides it from tick to tick: its samples, whether each gives a point,
    its points' times and usages, and their pairwise slopes sorted (None past ``MAX_TREND_POINTS``: those windows are
    thinned and fitted afresh), so that the next tick's window, this one less its oldest samples plus the newest,
    costs the slopes of the points that left and came rather than every pair again."""

    __slots__ = ("samples", "slopes", "start", "taken", "times", "usages")

    def __init__(self, samples: Sequence[ReplicaSample], start: float) -> None:
        self.samples = samples
        self.start = start
        points = [_point(s, start) for s in samples]
        self.taken = [p is not None for p in points]
        pts = [p for p in points if p is not None]
        self.times = [t for t, _v in pts]
        self.usages = [v for _t, v in pts]
        # sorted as statistics.median sorts them (see ``trend`` for the order of equal ones)
        self.slopes = sorted(_slopes(pts)) if len(pts) <= MAX_TREND_POINTS else None

    def slid(self, samples: Sequence[ReplicaSample], start: float) -> bool:
        """This window moved on to ``samples``, a window from ``start``, its slopes updated; False where the new
        window is not this one less some of its oldest samples plus newer ones (then this window is left unusable)."""
        old, slopes = self.samples, self.slopes
        if slopes is None or not samples or start < self.start:
            return False
        first = samples[0]
        # where the new window begins in this one (one sample left it: the usual tick)
        gone = 1 if len(old) > 1 and old[1] is first else next((k for k, s in enumerate(old) if s is first), -1)
        kept = len(old) - gone
        if gone < 0 or kept > len(samples) or not all(map(operator.is_, old[gone:], samples[:kept])):
            return False
        times, usages = self.times, self.usages
        left = self.taken[:gone].count(True)  # the points of the samples that left: the first ones
        stay_t, stay_v = times[left:], usages[left:]
        if stay_t and min(stay_t) < start:  # a point kept that is now before the window (times out of order)
            return False
        taken = self.taken[gone:]
        came = []
        for s in samples[kept:]:
            p = _point(s, start)
            taken.append(p is not None)
            if p is not None:
                came.append(p)
        if len(stay_t) + len(came) > MAX_TREND_POINTS:
            return False
        self.slopes = None  # unusable until every slope is updated
        # The slopes of the pairs that left, each of a point that left and a later one: (v2 - v1) / (t2 - t1) as
        # _slopes works it out (in C where every later point is later in time), each taken out of the sorted slopes.
        for i in range(left):
            t1, v1 = times[i], usages[i]
            later_t, later_v = times[i + 1 :], usages[i + 1 :]
            pairs: Iterable[float]
            if later_t and min(later_t) > t1:
                pairs = map(truediv, map(sub, later_v, repeat(v1)), map(sub, later_t, repeat(t1)))
            else:
                pairs = [(v2 - v1) / (t2 - t1) for t2, v2 in zip(later_t, later_v, strict=True) if t2 > t1]
            for x in pairs:
                j = bisect_left(slopes, x)
                if j == len(slopes) or slopes[j] != x:
                    return False
                del slopes[j]
        # The pairs that came, each of an earlier point and one that came, added, then sorted again (a sorted run and
        # a short tail: one pass and a merge).
        for t2, v2 in came:
            if stay_t and max(stay_t) < t2:
                slopes.extend(map(truediv, map(sub, repeat(v2), stay_v), map(sub, repeat(t2), stay_t)))
            else:
                slopes.extend([(v2 - v1) / (t2 - t1) for t1, v1 in zip(stay_t, stay_v, strict=True) if t2 > t1])
            stay_t.append(t2)
            stay_v.append(v2)
        slopes.sort()
        self.samples, self.start, self.taken, self.times, self.usages = samples, start, taken, stay_t, stay_v
        self.slopes = slopes
        return True

    def trend(self, min_samples: int) -> Trend | None:
        """``fit_trend`` of the window's samples."""
        times, slopes = self.times, self.slopes
        if slopes is None or len(times) < min_samples:
            return _fit(list(zip(times, self.usages, strict=True)), min_samples)
        if not slopes:
            return None
        # statistics.median of fit_trend's slopes: sorted, the middle one or the mean of the middle two. Equal floats
        # are the same number but for 0.0 and -0.0, which a sort leaves in the order it found them and a slope taken
        # out by its value may not be the one taken: a zero in the middle is left to fit_trend (a flat usage).
        slope = _middle(slopes)
        if slope == 0.0:
            return _fit(list(zip(times, self.usages, strict=True)), min_samples)
        # _fitted's median, each level v + slope * (t_last - t) worked out in C, in the same order
        t_last = times[-1]
        return slope, _middle(sorted(map(add, self.usages, map(mul, repeat(slope), map(sub, repeat(t_last), times)))))


def _middle(data: list[float]) -> float:
    """statistics.median of a sorted, non-empty list."""
    n = len(data)
    if n % 2 == 1:
        return data[n // 2]
    i = n // 2
    return (data[i - 1] + data[i]) / 2


def window_trend(
    history: Sequence[ReplicaSample], window_s: float, min_samples: int, trends: KvTrends | None = None
) -> Trend | None:
    """``fit_trend`` of ``history`` (a tuple or list, oldest first, as ``FleetState.replica_history`` or
    ``replica_history_since`` gives it) over the samples of its last ``window_s`` only, found by bisection; with
    ``trends``, the same replica's window asked for again (its first and latest sample objects and its length
    unchanged, however long the history it was read from) gets the answer already worked out."""
    if not history:
        return None
    if trends is not None:
        return trends.trend(history, window_s, min_samples)
    return fit_trend(
        history[bisect_left(history, history[-1].timestamp - window_s, key=_timestamp) :], window_s, min_samples
    )


class KvTrends:
    """The last trend per replica and window, kept by whoever holds one fleet's histories across ticks
    (``detectors.registry.Detection``): the detector and the exported projection ask for the same one each tick,
    each passing the history window it reads (the detector's may be longer than the projection's).

    A trend is recognised by its window's first and latest sample objects and its length, which within one
    ``FleetState`` pin the samples in between, whatever history the window was cut from; nothing pins them across
    states (or lists a caller builds), hence one ``KvTrends`` per state. A replica's entries go when the state lets the
    replica go (``keep_only``)."""

    __slots__ = ("_replicas",)

    def __init__(self) -> None:
        # replica key (``namespace/replica``) -> (window_s, min_samples) -> (latest, first, length, trend, the window
        # slid on from tick to tick)
        self._replicas: dict[
            str, dict[tuple[float, int], tuple[ReplicaSample, ReplicaSample, int, Trend | None, _Window]]
        ] = {}

    def trend(self, history: Sequence[ReplicaSample], window_s: float, min_samples: int) -> Trend | None:
        """``window_trend(history, window_s, min_samples)`` for a non-empty ``history``, worked out once, from the
        replica's window of the tick before where this one slid on from it (the same numbers to the bit)."""
        latest = history[-1]
        start_t = latest.timestamp - window_s
        windows = self._replicas.setdefault(replica_key(latest.namespace, latest.replica), {})
        known = windows.get((window_s, min_samples))
        if known is not None and known[0] is latest:
            # The known window, if it is this history's: its first sample where its length puts it, the one before
            # (if any) outside the window. No bisection: the projection asks again for every replica every tick.
            i = len(history) - known[2]
            if i >= 0 and history[i] is known[1] and (i == 0 or history[i - 1].timestamp < start_t):
                return known[3]
        start = bisect_left(history, start_t, key=_timestamp)
        samples = history[start:]
        if not samples:
            return fit_trend(samples, window_s, min_samples)  # as fit_trend answers it
        window = known[4] if known is not None else None
        if window is None or not window.slid(samples, start_t):
            window = _Window(samples, start_t)
        trend = window.trend(min_samples)
        windows[(window_s, min_samples)] = (latest, history[start], len(history) - start, trend, window)
        return trend

    def keep_only(self, replicas: Collection[str]) -> None:
        """Forget every replica whose key (``namespace/replica``) is not in ``replicas``: those the fleet let go."""
        for key in [k for k in self._replicas if k not in replicas]:
            del self._replicas[key]

    def __contains__(self, replica: object) -> bool:
        return replica in self._replicas
