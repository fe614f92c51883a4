"""A replica's counters kept monotone across a switch of Prometheus copy (an HA pair read without deduplication).

Each target's page is read from one copy (``series._one_copy``), the last one read while it is as complete as any;
when it stops answering (its server restarting or rolled, a failed scrape on that server only) the other copy is
read. The two servers scrape at different moments, so the copy switched to is often a few seconds behind: its
counters are lower than the values read the tick before, and a counter going down reads as a restart (the whole
previous value added to the window's increase: review G, session 18, an arrival rate of 2 -> 10,001 req/s).
As Thanos' deduplication does for counters at a switch of replica (``counterErrAdjustSeriesIterator`` in
``pkg/dedup/iter.go``: the replica switched to is offset by how far it is behind the last value read), a counter
lower than the last value read, at a switch, is read with that difference added from then on; a counter going down
on the same copy is a restart, as before (the offset dropped)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from collector.samples import Histogram, ReplicaSample
from collector.scrape import ScrapeResult

COUNTERS = ("prefix_queries", "prefix_hits", "preemptions", "prompt_tokens", "generation_tokens", "requests_finished")
HISTOGRAMS = ("ttft", "itl", "e2e", "queue_time")
FORGET_AFTER_S = 600.0  # a target not read for this long starts afresh


class CopySwitches:
    """Per target (URL): the copy last read, and per replica and counter the last raw value and the offset added."""

    def __init__(self, forget_after_s: float = FORGET_AFTER_S) -> None:
        self.forget_after_s = forget_after_s
        self._copy: dict[str, tuple[str, ...]] = {}
        self._seen: dict[str, float] = {}
        # url -> replica -> field -> (last raw value, offset added); a replica no longer read under its target dropped
        self._values: dict[str, dict[str, dict[str, tuple[Any, Any]]]] = {}

    def prefer(self) -> dict[str, tuple[str, ...]]:
        """Target URL -> the copy read last (``read_answers(prefer=...)``)."""
        return dict(self._copy)

    def apply(self, results: Sequence[ScrapeResult], now: float) -> list[ScrapeResult]:
        out = []
        for r in results:
            url = r.target.url
            if not r.copy or not r.ok:  # no copies (a single Prometheus, a deduplicating Querier), or nothing read
                out.append(r)
                continue
            switched = url in self._copy and self._copy[url] != r.copy
            self._copy[url], self._seen[url] = r.copy, now
            before = self._values.get(url, {})
            kept = self._values[url] = {p.replica: before.get(p.replica, {}) for p in r.replicas}
            replicas = tuple(self._replica(kept[p.replica], p, switched) for p in r.replicas)
            out.append(replace(r, replicas=replicas))
        self._forget(now)
        return out

    def _replica(self, values: dict[str, tuple[Any, Any]], sample: ReplicaSample, switched: bool) -> ReplicaSample:
        changes: dict[str, Any] = {}
        for name in COUNTERS:
            value = getattr(sample, name)
            if value is not None:
                adjusted = even_counter(values, name, value, switched)
                if adjusted != value:
                    changes[name] = adjusted
        for name in HISTOGRAMS:
            h = getattr(sample, name)
            if h is not None:
                adjusted_h = even_histogram(values, name, h, switched)
                if adjusted_h is not h:
                    changes[name] = adjusted_h
        return replace(sample, **changes) if changes else sample

    def _forget(self, now: float) -> None:
        for url in [url for url, t in self._seen.items() if now - t > self.forget_after_s]:
            del self._seen[url], self._copy[url]
            self._values.pop(url, None)


def even_counter(values: dict[str, tuple[Any, Any]], key: str, value: float, switched: bool) -> float:
    """``value`` with the offset kept in ``values[key]``: set at a switch of copy to how far ``value`` is behind the
    last value read, dropped when the same copy goes down (a restart)."""
    last = values.get(key)
    offset = 0.0
    if last is not None:
        raw, offset = last
        if switched:
            offset = max(0.0, raw + offset - value)  # behind the last value read: no restart, no increase
        elif value < raw:  # the same copy went down: a restart, read as one
            offset = 0.0
    values[key] = (value, offset)
    return value + offset


def even_histogram(values: dict[str, tuple[Any, Any]], key: str, h: Histogram, switched: bool) -> Histogram:
    """`even_counter` for a cumulative histogram, bucket by bucket (new bounds: read as they come)."""
    last = values.get(key)
    offset: Histogram | None = None
    if last is not None and last[0].bounds == h.bounds:
        raw, offset = last
        if switched:
            before = _plus(raw, offset)
            offset = Histogram(
                h.bounds,
                tuple(max(0.0, b - c) for b, c in zip(before.counts, h.counts, strict=True)),
                max(0.0, before.sum - h.sum),
                max(0.0, before.count - h.count),
            )
        elif offset is not None and (h.count < raw.count or any(map(operator.lt, h.counts, raw.counts))):
            offset = None
    values[key] = (h, offset)
    return _plus(h, offset)


def _plus(h: Histogram, offset: Histogram | None) -> Histogram:
    if offset is None or not (offset.count or offset.sum or any(offset.counts)):
        return h
    return Histogram(
        h.bounds,
        tuple(a + b for a, b in zip(h.counts, offset.counts, strict=True)),
        h.sum + offset.sum,
        h.count + offset.count,
    )
