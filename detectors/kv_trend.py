"""The Theil-Sen trend of a replica's KV usage over a recent window, as the KV detector and the exported projection
read it every tick.

Its cost is bounded by the window, never by the history kept (an hour): the window's samples are found by bisection
on the history's times, and a replica's trend is worked out once per tick however often it is asked for.
"""

from __future__ import annotations

import operator
import statistics
from bisect import bisect_left
from collections.abc import Sequence

from collector.samples import ReplicaSample
from collector.validity import fraction

Trend = tuple[float, float]  # (slope per second, fitted usage at the latest sample)

_timestamp = operator.attrgetter("timestamp")


def fit_trend(history: Sequence[ReplicaSample], window_s: float, min_samples: int) -> Trend | None:
    """Theil-Sen (slope per second, fitted usage at the latest sample) of kv_usage over the last ``window_s`` of
    ``history``; None with fewer than ``min_samples`` points. The median of pairwise slopes ignores a noisy scrape
    or two (least squares would let one spike at the window's end set the slope), and the fitted level, not the
    last raw value, is what is projected. O(n^2) pairs over the window's ~12-24 samples."""
    start = history[-1].timestamp - window_s
    pts = [(s.timestamp, v) for s in history if s.timestamp >= start and (v := fraction(s.kv_usage)) is not None]
    if len(pts) < min_samples:
        return None
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :] if t2 > t1]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    t_last = pts[-1][0]
    return slope, statistics.median(v + slope * (t_last - t) for t, v in pts)


def window_trend(history: Sequence[ReplicaSample], window_s: float, min_samples: int) -> Trend | None:
    """``fit_trend`` of ``history`` (a tuple or list, oldest first, as ``FleetState.replica_history`` gives it) over
    the samples of its last ``window_s`` only, found by bisection; the same replica's history asked for again (its
    first and latest sample objects and its length unchanged) gets the answer already worked out."""
    if not history:
        return None
    first, latest = history[0], history[-1]
    key = (latest.namespace, latest.replica, window_s, min_samples)
    known = _TRENDS.get(key)
    if known is not None and known[0] is latest and known[1] is first and known[2] == len(history):
        return known[3]
    recent = history[bisect_left(history, latest.timestamp - window_s, key=_timestamp) :]
    trend = fit_trend(recent, window_s, min_samples)
    if len(_TRENDS) >= _MAX_TRENDS:
        _TRENDS.clear()
    _TRENDS[key] = (latest, first, len(history), trend)
    return trend


# The last trend per replica and window: the detector and the exported projection ask for the same one each tick.
_TRENDS: dict[tuple[str, str, float, int], tuple[ReplicaSample, ReplicaSample, int, Trend | None]] = {}
_MAX_TRENDS = 50_000
