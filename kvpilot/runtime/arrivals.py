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
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.promql.decode import Series

log = logging.getLogger(__name__)

Query = Callable[[str, float], Awaitable[list[Series]]]  # (PromQL, time) -> the instant vector's series
SeriesId = tuple[tuple[str, str], ...]

SAID_KEPT = 256  # distinct problems with the answer said once each (past it, said again from none)


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

    def why_not(self, labels: Mapping[str, str]) -> str:
        """Why ``key`` found no deployment for a series with ``labels``: the labels the mapping names that it lacks
        (and those it carries), or its value not among ``deployments``."""
        needed = [self.deployment_label]
        if not self.deployments and not self.namespace:
            needed.append(self.namespace_label)
        missing = [n for n in needed if not labels.get(n)]
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
    - Its total grows by each step spread over the time the step took to build, at most ``window_s``.
    - A series or deployment not read for twice the window is forgotten."""

    def __init__(self, window_s: float) -> None:
        if not 0 < window_s < math.inf:
            raise ValueError(f"window_s must be > 0 and finite, got {window_s}")
        self.window_s = window_s
        self._series: dict[SeriesId, _Counter] = {}
        self._points: dict[str, deque[tuple[float, float]]] = {}  # deployment -> (time, requests counted so far)
        self._counted: dict[str, float] = {}  # deployment -> requests counted since first read (resets taken out)
        self._totals: dict[str, float] = {}  # deployment -> requests handed to the totals so far

    def observe(self, at: float, readings: Iterable[tuple[str, SeriesId, float]]) -> Arrivals:
        """One tick's readings, ``(deployment, series, value)``, at ``at``; what the planner is handed."""
        read: set[str] = set()
        for key, series, value in readings:
            read.add(key)
            counted, released = self._step(at, series, value)
            self._counted[key] = self._counted.get(key, 0.0) + counted
            self._totals[key] = self._totals.get(key, 0.0) + released
        rates: dict[str, float] = {}
        for key in read:
            rate = self._rate(key, at)
            if rate is not None:
                rates[key] = rate
        self._forget(at, read)
        return Arrivals(rates=rates, totals={key: self._totals[key] for key in read})

    def _step(self, at: float, series: SeriesId, value: float) -> tuple[float, float]:
        """(requests this series counted since its last reading, requests handed to the totals now)."""
        c = self._series.get(series)
        if c is None:
            self._series[series] = _Counter(value, seen_at=at, moved_at=at)
            return 0.0, 0.0
        if at <= c.seen_at:
            return 0.0, 0.0  # read twice in one tick (a duplicate series): counted once
        counted = value if value < c.value else value - c.value
        elapsed = at - c.seen_at
        if counted > 0:
            c.pending += counted
            built_s = min(max(at - c.moved_at, elapsed), self.window_s)
            c.release_rps = c.pending / built_s
            c.moved_at = at
        released = min(c.pending, c.release_rps * elapsed)
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
    pair of Prometheus servers (differing only in ``replica_labels``) are read once. A failed query raises
    ``PromQLError``: the loop counts it (``kvpilot_loop_stage_errors_total{stage="arrivals"}``), logs it, and decides
    that tick on the engines' estimate. A series the mapping cannot place is said once, naming why."""

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
        self.named: frozenset[str] = frozenset()  # the deployments the last answer named

    async def read(self, now: float, at: float) -> Arrivals:
        """The counter at ``now`` (wall time, Prometheus'), its rates on the loop's step-free ``at``."""
        series = await self._query(self.text, now)
        readings = self._readings(series)
        self.named = frozenset(key for key, _, _ in readings)
        if not series:
            self._say_once(
                f"collector.arrivals: the query returns no series (is the gateway scraped by this Prometheus?): "
                f"{self.text[:200]!r}; every deployment keeps the engines' estimate"
            )
        return self.counts.observe(at, readings)

    async def aclose(self) -> None:
        if self._close is not None:
            await self._close()

    def _readings(self, series: Sequence[Series]) -> list[tuple[str, SeriesId, float]]:
        readings: list[tuple[str, SeriesId, float]] = []
        seen: set[SeriesId] = set()
        # the copy whose labels sort first, as the PromQL source reads copies (collector.promql.series)
        for s in sorted(series, key=lambda s: sorted(s["metric"].items())):
            labels: Mapping[str, str] = s["metric"]
            key = self.mapping.key(labels)
            if key is None:
                self._say_once(f"collector.arrivals: a series is left out: {self.mapping.why_not(labels)}")
                continue
            identity = tuple(sorted((k, v) for k, v in labels.items() if k not in self._replica_labels))
            if identity in seen:
                continue
            seen.add(identity)
            try:
                value = float(s["value"][1])
            except (TypeError, ValueError, IndexError, KeyError):
                value = math.nan
            if not (math.isfinite(value) and value >= 0):
                self._say_once(f"collector.arrivals: {_shown(labels)} is {s.get('value')!r}, not a count: left out")
                continue
            readings.append((key, identity, value))
        return readings

    def _say_once(self, message: str) -> None:
        if message in self._said:
            return
        if len(self._said) >= SAID_KEPT:
            self._said.clear()
        self._said.add(message)
        log.warning("%s", message)


def _shown(labels: Mapping[str, str]) -> str:
    name = labels.get("__name__", "")
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{inner}}}"[:300]
