"""How alike a deployment's replicas' prefix-cache hit ratios are, over windows of their kept history.

A router that keeps prefixes together gives each replica the ratio of the prefixes it owns (the one holding the
most popular system prompt hits more than the one taking the spill), while one that spreads requests regardless
of their prefixes (round-robin, kube-proxy's random pick) sends every replica the same mix, and their ratios differ
by sampling noise alone. prefix_cache_miss reads the evening-out, beside the fall of the deployment's ratio, as lost
affinity (docs/detectors.md).
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from collector.samples import ReplicaSample
from collector.state import FleetState


def ratio_spread(ratios: Sequence[float]) -> float | None:
    """The coefficient of variation (population standard deviation over mean) of per-replica hit ratios; None for
    fewer than two replicas or a mean of zero (nothing cached anywhere: no spread to read)."""
    if len(ratios) < 2:
        return None
    mean = statistics.fmean(ratios)
    return statistics.pstdev(ratios, mean) / mean if mean > 0 else None


class _Track:
    """One replica's kept samples with their times, for windows found by bisection."""

    __slots__ = ("samples", "times")

    def __init__(self, samples: Sequence[ReplicaSample]) -> None:
        self.samples = samples
        self.times = [s.timestamp for s in samples]

    def ratio(self, start: float, end: float) -> float | None:
        """Δhits / Δqueries from the newest sample at or before ``start`` to the newest at or before ``end``: at least
        the window, more where the history is thinned. None where the replica has no sample that old, served no
        queries in between, or a counter went back (a restart)."""
        j = bisect_right(self.times, end) - 1
        i = bisect_right(self.times, start) - 1
        if i < 0 or j <= i:
            return None
        first, last = self.samples[i], self.samples[j]
        if None in (first.prefix_hits, first.prefix_queries, last.prefix_hits, last.prefix_queries):
            return None
        hits = (last.prefix_hits or 0.0) - (first.prefix_hits or 0.0)
        queries = (last.prefix_queries or 0.0) - (first.prefix_queries or 0.0)
        if queries <= 0 or hits < 0 or hits > queries:
            return None
        return hits / queries


def spreads(
    state: FleetState, replicas: Iterable[str], times: Sequence[float], *, min_replicas: int = 2, warm_s: float = 0.0
) -> list[float]:
    """``ratio_spread`` of the replicas' hit ratios over the rate window ending at each of ``times`` (oldest first),
    for the times where at least ``min_replicas`` replicas served queries in that window (the others are left out of
    it). ``warm_s``: a replica counts in a window only once it has been scraped for this long before the window
    starts (its oldest kept sample): a replica that just started hits less while its cache fills, whatever the
    routing. Each replica's samples are read from the oldest window's start on (``replica_history_since``), not its
    whole kept history: a window starts at the newest sample at or before it, so that sample is kept, found in the
    whole history only where the thinned history has none since the start."""
    if not times:
        return []
    window = state.rate_window_s
    start = min(times) - window
    tracks = []
    for key in replicas:
        samples = state.replica_history_since(key, start - state.history_step_s)
        if samples and samples[0].timestamp > start:
            samples = state.replica_history(key)  # nothing at or before the start since then: an older one, if kept
        first = state.replica_history_start(key)
        if samples and first is not None:
            tracks.append((first + warm_s, _Track(samples)))
    out = []
    for t in times:
        ratios = [r for warm, track in tracks if warm <= t - window and (r := track.ratio(t - window, t)) is not None]
        spread = ratio_spread(ratios) if len(ratios) >= min_replicas else None
        if spread is not None:
            out.append(spread)
    return out
