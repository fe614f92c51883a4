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
from collections.abc import Collection, Sequence

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
    # `fraction` of each usage, called only where it could change one: a usage strictly inside (0, 1) is its own
    # `fraction` (the same object), and nearly every sample's is, so the call is skipped for those.
    pts = [
        (s.timestamp, v)
        for s in history
        if s.timestamp >= start and (v := s.kv_usage) is not None and (0.0 < v < 1.0 or (v := fraction(v)) is not None)
    ]
    if len(pts) < min_samples:
        return None
    pts = thinned(pts)
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :] if t2 > t1]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    t_last = pts[-1][0]
    return slope, statistics.median(v + slope * (t_last - t) for t, v in pts)


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
        # replica key (``namespace/replica``) -> (window_s, min_samples) -> (latest, first, length, trend)
        self._replicas: dict[str, dict[tuple[float, int], tuple[ReplicaSample, ReplicaSample, int, Trend | None]]] = {}

    def trend(self, history: Sequence[ReplicaSample], window_s: float, min_samples: int) -> Trend | None:
        """``window_trend(history, window_s, min_samples)`` for a non-empty ``history``, worked out once."""
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
        trend = fit_trend(history[start:], window_s, min_samples)
        windows[(window_s, min_samples)] = (latest, history[start], len(history) - start, trend)
        return trend

    def keep_only(self, replicas: Collection[str]) -> None:
        """Forget every replica whose key (``namespace/replica``) is not in ``replicas``: those the fleet let go."""
        for key in [k for k in self._replicas if k not in replicas]:
            del self._replicas[key]

    def __contains__(self, replica: object) -> bool:
        return replica in self._replicas
