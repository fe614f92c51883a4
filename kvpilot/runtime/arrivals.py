"""Arrivals per deployment from a gateway's request counter, read through PromQL each tick (`collector.arrivals`).

The engines' own estimate (requests finished plus the change in requests waiting and running, ``FleetState``) lurches
while replicas join and leave and sees nothing at zero replicas; a gateway or router in front of the replicas counts
every request that reached it. ``GatewayArrivals`` asks a Prometheus-compatible API for that counter each tick, maps
each series to a deployment by its labels (``LabelMapping``), and ``CounterRates`` turns the readings into what the
planner takes: ``arrival_rates`` (requests/s over the rate window, each series' resets taken out as Prometheus'
``rate`` takes them out) and ``arrivals_totals`` (the requests counted since kvpilot began reading, for the burst
floor's short window).

A counter read through Prometheus moves once per scrape of the gateway (30 s under many ServiceMonitors), not once per
tick: handed as it moves, the burst floor would read each scrape's requests as a burst of one tick. Each step is
therefore spread over the time it took to build (the time since the series last moved, at most the rate window) in
the totals; the rate is the counter's increase over the window, where such steps average out.

What an answer may hold, and how it is read (docs/scaling.md, "Arrivals from a gateway"):

- an answer that is no Prometheus API vector (another shape, an HTML page, a 5xx, a body past the size cap, no
  complete answer within the query's timeout): ``PromQLError`` from the client, which the loop counts
  (``kvpilot_loop_stage_errors_total{stage="arrivals"}``); that tick keeps the engines' estimate;
- several series naming one deployment (one per gateway pod, route or response code): summed, each one's resets
  taken out first, as ``sum by (deployment) (rate(...))`` reads them; copies of one series differing only in the
  configured replica labels (an HA pair of Prometheus servers): read once, from the copy read last, evened as Thanos'
  deduplication evens a switch of copy (``collector.promql.copies.even_counter``): the other copy, scraped a few
  seconds earlier, is behind, and its lower value is no restart;
- a value that is no count (NaN, Inf, negative, unreadable): that series left out;
- a step no gateway counts (more than ``MAX_SERIES_RPS`` requests/s of one series since its last reading: a counter
  jumping by 1e18, a corrupted or wrapped value): not read as requests; the series is read from its new value on;
- each kind of series left out is said once, with how many there were (50,000 unmapped series are one line, not
  50,000); the answer is read in a worker thread, so a large one does not hold the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.promql.copies import even_counter
from collector.promql.decode import Series
from collector.rates import counter_step

log = logging.getLogger(__name__)

Query = Callable[[str, float], Awaitable[list[Series]]]  # (PromQL, time) -> the instant vector's series
SeriesId = tuple[tuple[str, str], ...]

SAID_KEPT = 256  # distinct problems with the answer said once each (past it, said again from none)
# No gateway series counts a million requests a second: a step past it is a corrupted or jumping counter (a 1e18 jump
# read as requests would ask for every replica the planner may give), not demand.
MAX_SERIES_RPS = 1e6


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One tick's reading: per deployment ("namespace/name") the gateway named."""

    rates: Mapping[str, float] = field(default_factory=dict)  # requests/s over the rate window
    totals: Mapping[str, float] = field(default_factory=dict)  # requests counted since kvpilot began reading


@dataclass(frozen=True, slots=True)
class LabelMapping:
    """Which deployment a series counts the requests of: ``namespace_label``/``deployment_label`` (or a fixed
    ``namespace``), or, with ``deployments``, the deployment label's value looked up there (a model name, an Envoy
    cluster)."""

    deployment_label: str = "deployment"
    namespace_label: str = "namespace"
    namespace: str | None = None
    deployments: Mapping[str, str] = field(default_factory=dict)

    def key(self, labels: Mapping[str, str]) -> str | None:
        value = labels.get(self.deployment_label)
        if not value:
            return None
        if self.deployments:
            return self.deployments.get(value)
        namespace = self.namespace or labels.get(self.namespace_label)
        return f"{namespace}/{value}" if namespace else None

    def missing(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The labels the mapping reads that ``labels`` lacks (or carries empty)."""
        needed = [self.deployment_label]
        if not self.deployments and not self.namespace:
            needed.append(self.namespace_label)
        return tuple(n for n in needed if not labels.get(n))

    def why_not(self, labels: Mapping[str, str]) -> str:
        """Why ``key`` found no deployment for a series with ``labels``: the labels the mapping names that it lacks
        (and those it carries), or its value not among ``deployments``."""
        missing = self.missing(labels)
        if missing:
            carried = ", ".join(sorted(labels)) or "none"
            said = " nor ".join(repr(n) for n in missing)
            return f"the answer's series carry no label {said} (they carry: {carried})"
        value = labels[self.deployment_label]
        listed = ", ".join(sorted(self.deployments)[:10])
        return f"{self.deployment_label}={value!r} is not among collector.arrivals.deployments ({listed})"


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


class GatewayArrivals:
    """``collector.arrivals`` with ``source: promql``: its ``query`` asked each tick through ``query`` (the PromQL
    source's client, timeout and size cap), its series mapped by ``mapping``. Copies of one series kept by an HA
    pair of Prometheus servers (differing only in ``replica_labels``) are read once: the copy read last while it
    answers, a switch of copy evened (``collector.promql.copies.even_counter``). A failed query raises
    ``PromQLError``: the loop counts it (``kvpilot_loop_stage_errors_total{stage="arrivals"}``), logs it, and decides
    that tick on the engines' estimate. Each kind of series left out (unmapped, no count, a step no gateway counts)
    is said once, with how many. The answer is read in a worker thread (50,000 series: 0.4 s of CPU)."""

    def __init__(
        self,
        query: Query,
        text: str,
        mapping: LabelMapping,
        *,
        window_s: float,
        replica_labels: Sequence[str] = (),
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``close``: what ``aclose`` ends (a client of its own; none where the PromQL source's is shared)."""
        self._query = query
        self._close = close
        self.text = text
        self.mapping = mapping
        self.counts = CounterRates(window_s)
        self._replica_labels = frozenset(replica_labels)
        self._said: set[str] = set()
        # per series read from copies: the copy read last, when, and its counter's evening (even_counter's state)
        self._copies: dict[SeriesId, tuple[SeriesId, float, dict[str, tuple[float, float]]]] = {}
        self.named: frozenset[str] = frozenset()  # the deployments the last answer named

    async def read(self, now: float, at: float) -> Arrivals:
        """The counter at ``now`` (wall time, Prometheus'), its rates on the loop's step-free ``at``."""
        series = await self._query(self.text, now)
        return await asyncio.to_thread(self._read, series, at)

    def _read(self, series: Sequence[Series], at: float) -> Arrivals:
        readings = self._readings(series, at)
        self.named = frozenset(key for key, _, _ in readings)
        if not series:
            self._say_once(
                "no series",
                f"collector.arrivals: the query returns no series (is the gateway scraped by this Prometheus?): "
                f"{self.text[:200]!r}; every deployment keeps the engines' estimate",
            )
        arrivals = self.counts.observe(at, readings)
        if self.counts.implausible:
            first, jump = self.counts.implausible[0]
            self._say_once(
                "implausible",
                f"collector.arrivals: {_many(len(self.counts.implausible))} jumped by more than "
                f"{MAX_SERIES_RPS:.0e} requests/s (no gateway counts that: a corrupted or jumping counter), e.g. "
                f"{_shown(dict(first))} by {jump:.6g}; that step is not read as requests, the series is read from its "
                "new value on",
            )
        return arrivals

    async def aclose(self) -> None:
        if self._close is not None:
            await self._close()

    def _readings(self, series: Sequence[Series], at: float) -> list[tuple[str, SeriesId, float]]:
        left: dict[str, tuple[int, str]] = {}  # kind of problem -> (series, what the first of them says)

        def leave(kind: str, why: str) -> None:
            n, first = left.get(kind, (0, why))
            left[kind] = (n + 1, first)

        chosen: dict[SeriesId, tuple[SeriesId, str, float]] = {}  # series -> (copy, deployment, value)
        replica_labels = self._replica_labels
        for s in series:
            labels: Mapping[str, str] = s["metric"]
            key = self.mapping.key(labels)
            if key is None:
                leave(f"unmapped {self.mapping.missing(labels)}", self.mapping.why_not(labels))
                continue
            try:
                value = float(s["value"][1])
            except (TypeError, ValueError, IndexError, KeyError):
                value = math.nan
            if not (math.isfinite(value) and value >= 0):
                kind = "negative" if value < 0 else "nan" if math.isnan(value) else "inf"
                leave(f"not a count {kind}", f"{_shown(labels)} is {s.get('value')!r}, not a count")
                continue
            if replica_labels:
                identity = tuple(sorted((k, v) for k, v in labels.items() if k not in replica_labels))
                copy = tuple(sorted((k, v) for k, v in labels.items() if k in replica_labels))
            else:
                identity, copy = tuple(sorted(labels.items())), ()
            had = chosen.get(identity)
            if had is None or self._rather(identity, copy, had[0]):
                chosen[identity] = (copy, key, value)
        for kind, (n, why) in left.items():
            self._say_once(kind, f"collector.arrivals: {_many(n)} left out: {why}")
        readings = [
            (key, identity, self._evened(identity, copy, value, at)) for identity, (copy, key, value) in chosen.items()
        ]
        horizon = 2 * self.counts.window_s
        for identity in [i for i, (_, seen, _) in self._copies.items() if at - seen > horizon]:
            del self._copies[identity]
        return readings

    def _rather(self, identity: SeriesId, copy: SeriesId, other: SeriesId) -> bool:
        """Whether ``copy`` of a series is read rather than ``other``: the copy read last, else the one that sorts
        first (as the PromQL source picks a copy: ``collector.promql.series``). Identical copies: the first."""
        last = self._copies.get(identity)
        if last is not None and last[0] in (copy, other):
            return last[0] == copy and other != copy
        return copy < other

    def _evened(self, identity: SeriesId, copy: SeriesId, value: float, at: float) -> float:
        if not copy:
            return value
        last = self._copies.get(identity)
        evening = last[2] if last is not None else {}
        value = even_counter(evening, "value", value, switched=last is not None and last[0] != copy)
        self._copies[identity] = (copy, at, evening)
        return value

    def _say_once(self, kind: str, message: str) -> None:
        """``message``, said once for its ``kind`` of problem (again after ``SAID_KEPT`` kinds)."""
        if kind in self._said:
            return
        if len(self._said) >= SAID_KEPT:
            self._said.clear()
        self._said.add(kind)
        log.warning("%s", message)


def _many(n: int) -> str:
    return "a series" if n == 1 else f"{n} series"


def _shown(labels: Mapping[str, str]) -> str:
    name = labels.get("__name__", "")
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{inner}}}"[:300]
