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
- a series whose newest sample is older than ``max_sample_age_s`` (``collector.arrivals.max_sample_age_s``: the
  query is asked with ``timestamp()`` of it, ``timed``): a gateway that stopped updating it (dead, or its scrapes
  failing) under a query layer that answers the last sample for the lookback (no staleness markers: some Thanos and
  remote-write set-ups) read as a rate falling to 0; left out, so that its deployment keeps the engines' estimate,
  counted by the loop (``kvpilot_loop_stage_errors_total{stage="arrivals"}``, once a tick). A query the server refuses
  to wrap (``timestamp`` of series differing only in their name) is asked alone, then read without times;
- each kind of series left out is said once, with how many there were (50,000 unmapped series are one line, not
  50,000); the answer is read in a worker thread, so a large one does not hold the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.clock import CLOCK_OFFSET_SAID_S, allowed_offset
from collector.counter_rates import MAX_SERIES_RPS, Arrivals, CounterRates, SeriesId
from collector.promql.copies import even_counter
from collector.promql.decode import PromQLError, Series, Stopped

# The reader shared with `kvpilot backtest` and `kvpilot demo --arrivals gateway` (``collector.counter_rates``)
__all__ = ["MAX_SERIES_RPS", "Arrivals", "CounterRates", "GatewayArrivals", "LabelMapping", "SeriesId", "timed"]

log = logging.getLogger(__name__)

Query = Callable[[str, float], Awaitable[list[Series]]]  # (PromQL, time) -> the instant vector's series

SAID_KEPT = 256  # distinct problems with the answer said once each (past it, said again from none)

TIME_LABEL = "kvpilot_sample_time"  # marks the series of an answer to ``timed`` that carry a sample time
# A timed query the server refuses as a query (HTTP 400 or 422, or an answer whose errorType is bad_data or execution,
# as ``collector.promql.decode`` writes it), where the query alone may answer. Not any text with the word in it: a
# proxy's 503 "query execution timed out" is the server's trouble, not the query's.
REFUSED_QUERY = re.compile(r"HTTP 4(00|22)\b|/api/v1/query: (bad_data|execution): ")
UNTIMED_AFTER = 3  # ticks in a row the timed query is refused while the query alone answers: then asked alone ...
TIMED_AGAIN_AFTER_S = 600.0  # ... for this long (a refusal that was the server's passing trouble), then tried again


def timed(text: str) -> str:
    """The query ``text`` and, in the same answer, each of its series' newest sample time. An instant query's values
    carry the evaluation time; ``timestamp()`` of a selector answers the time of its last sample within the lookback
    (Prometheus, Thanos; of an expression that is no selector, an aggregation, the evaluation time: never stale). It
    drops the metric name, and ``or`` matches series on their other labels, so the times carry a label of ours
    (``TIME_LABEL``) and are never taken for the values. Newlines end a comment the query may end with."""
    return f'({text}\n) or label_replace(timestamp({text}\n), "{TIME_LABEL}", "1", "", "")'


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
        max_sample_age_s: float | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
        server_clock_offset_s: Callable[[], float | None] | None = None,
    ) -> None:
        """``close``: what ``aclose`` ends (a client of its own; none where the PromQL source's is shared).
        ``max_sample_age_s``: series whose newest sample is older are not read (the query asked through ``timed``);
        None: the query asked alone, every series read. ``server_clock_offset_s``: how far the server's clock reads
        ahead of ours (``PromQLSource.server_clock_offset_s``; None: not known), which a sample's age allows for."""
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
        self.max_sample_age_s = max_sample_age_s
        self.stale = 0  # series the last read left out as not updated for max_sample_age_s
        self._refused = 0  # ticks in a row the timed query was refused and the query alone answered
        self._untimed_until: float | None = None  # asked alone until then (step-free time), after UNTIMED_AFTER
        self._server_offset = server_clock_offset_s
        self.clock_offset_s = 0.0  # the server's clock less ours, as allowed for in the last read (0: not known)

    @property
    def timed(self) -> bool:
        """Whether the samples' age is read (``kvpilot_arrivals_sample_age_read``): asked through ``timed``, not
        alone after the server refused it (until it is tried again)."""
        return self.max_sample_age_s is not None and self._untimed_until is None

    async def read(self, now: float, at: float) -> Arrivals:
        """The counter at ``now`` (wall time), its rates on the loop's step-free ``at``. Asked at ``now`` on the
        server's clock (by the source, ``PromQLSource.query_vector``, as it asks all its queries): Prometheus answers an
        instant query with the samples of the 5 minutes before the time it is asked at, so a server an hour behind,
        asked at our time, answered no series at all (and one ahead, an hour old ones)."""
        series = await self._ask(now, at)  # the samples' age: on the server's clock, in _read
        return await asyncio.to_thread(self._read, series, now, at)

    async def _ask(self, now: float, at: float) -> list[Series]:
        """The answer to the query, through ``timed`` while sample times are wanted and the server takes it. Refused
        ``UNTIMED_AFTER`` ticks in a row while the query alone answers, it is asked alone for
        ``TIMED_AGAIN_AFTER_S``, then tried again (before, it stayed off for the process's life, a refusal that was
        the server's passing trouble included)."""
        if self.max_sample_age_s is None:
            return await self._query(self.text, now)
        if self._untimed_until is not None:
            if at < self._untimed_until:
                return await self._query(self.text, now)
            self._refused = UNTIMED_AFTER - 1  # one more refusal and it is off for another while
        try:
            series = await self._query(timed(self.text), now)
        except PromQLError as e:
            if isinstance(e, Stopped) or not REFUSED_QUERY.search(str(e)):
                raise
            series = await self._query(self.text, now)  # fails as it would have: counted by the loop
            self._refused += 1
            if self._refused >= UNTIMED_AFTER:
                self._untimed_until = at + TIMED_AGAIN_AFTER_S
                self._say_once(
                    "untimed",
                    f"collector.arrivals: the query wrapped in timestamp() (to read how old each sample is) is refused "
                    f"({e}); it is asked alone, tried again every {TIMED_AGAIN_AFTER_S:g} s, and meanwhile a series "
                    "that stops updating reads as a rate falling to 0 (kvpilot_arrivals_sample_age_read 0; "
                    'docs/scaling.md, "Arrivals from a gateway")',
                )
            return series
        if self._untimed_until is not None:
            log.info("collector.arrivals: the query wrapped in timestamp() is answered again; samples' age read again")
            self._said.discard("untimed")
        self._refused, self._untimed_until = 0, None
        return series

    def _server_now(self, now: float) -> float:
        """``now`` on the server's clock, which its samples' times are on: ours where the two agree to within
        ``collector.clock.CLOCK_OFFSET_ALLOWED_S`` or the server's is not known (before, a server an hour behind had
        every sample read an hour old: stale, the gateway ignored)."""
        offset = allowed_offset(self._server_offset() if self._server_offset is not None else None)
        self.clock_offset_s = offset
        if abs(offset) >= CLOCK_OFFSET_SAID_S:
            self._say_once(
                "clock offset",
                f"collector.arrivals: the Prometheus API's clock reads {abs(offset):.0f} s "
                f"{'ahead of' if offset > 0 else 'behind'} kvpilot's (its answers' Date header); each sample's age is "
                "read on its clock (kvpilot_arrivals_clock_offset_seconds). Check NTP on both hosts",
            )
        return now + offset

    def _read(self, series: Sequence[Series], now: float, at: float) -> Arrivals:
        times, series = _sample_times(series) if self.max_sample_age_s is not None else ({}, series)
        server_now = self._server_now(now)
        readings = self._readings(series, at, server_now if times else now, times)
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

    def _readings(
        self, series: Sequence[Series], at: float, now: float, times: Mapping[SeriesId, float]
    ) -> list[tuple[str, SeriesId, float]]:
        left: dict[str, tuple[int, str]] = {}  # kind of problem -> (series, what the first of them says)
        self.stale = 0

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
            if times and self.max_sample_age_s is not None:
                sampled = times.get(tuple(sorted((k, v) for k, v in labels.items() if k != "__name__")))
                if sampled is not None and now - sampled > self.max_sample_age_s:
                    self.stale += 1
                    leave(
                        "stale",
                        f"{_shown(labels)} was last sampled {now - sampled:.0f} s ago (more than "
                        f"collector.arrivals.max_sample_age_s, {self.max_sample_age_s:g} s): its gateway stopped "
                        "updating it (gone, or its scrapes failing), not a rate of 0; while no series of a deployment "
                        "is fresh, it keeps the engines' estimate",
                    )
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


def _sample_times(series: Sequence[Series]) -> tuple[dict[SeriesId, float], list[Series]]:
    """An answer to ``timed`` apart: (each series' newest sample time, by its labels but its name; the values).
    An answer without times (a server or proxy that answered the values alone) reads as before: no series is stale.
    A time that is no time since 1970 (0: an engine that does not answer ``timestamp`` of a selector) is left out."""
    times: dict[SeriesId, float] = {}
    values: list[Series] = []
    for s in series:
        labels: Mapping[str, str] = s["metric"]
        if TIME_LABEL not in labels:
            values.append(s)
            continue
        try:
            t = float(s["value"][1])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if math.isfinite(t) and t > 0:
            times[tuple(sorted((k, v) for k, v in labels.items() if k != TIME_LABEL))] = t
    return times, values


def _many(n: int) -> str:
    return "a series" if n == 1 else f"{n} series"


def _shown(labels: Mapping[str, str]) -> str:
    name = labels.get("__name__", "")
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{inner}}}"[:300]
