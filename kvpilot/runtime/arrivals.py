"""Arrivals per deployment from a gateway's request counter, read through PromQL each tick (`collector.arrivals`).

The engines' own estimate (requests finished plus the change in requests waiting and running, ``FleetState``) lurches
while replicas join and leave and sees nothing at zero replicas; a gateway or router in front of the replicas counts
every request that reached it. ``GatewayArrivals`` asks a Prometheus-compatible API for that counter each tick, maps
each series to a deployment by its labels (``LabelMapping``), and ``CounterRates`` (``collector.counter_rates``, the
reader `kvpilot backtest` and `kvpilot demo --arrivals gateway` use too) turns the readings into what the planner
takes: ``arrival_rates`` (requests/s over the rate window, reset-aware) and ``arrivals_totals`` (the requests counted
since kvpilot began reading, for the burst floor's short window, each scrape's step spread over the time it took to
build).

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.counter_rates import MAX_SERIES_RPS, Arrivals, CounterRates, SeriesId
from collector.promql.copies import even_counter
from collector.promql.decode import Series

# The reader shared with `kvpilot backtest` and `kvpilot demo --arrivals gateway` (``collector.counter_rates``)
__all__ = ["MAX_SERIES_RPS", "Arrivals", "CounterRates", "GatewayArrivals", "LabelMapping", "SeriesId"]

log = logging.getLogger(__name__)

Query = Callable[[str, float], Awaitable[list[Series]]]  # (PromQL, time) -> the instant vector's series

SAID_KEPT = 256  # distinct problems with the answer said once each (past it, said again from none)


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
