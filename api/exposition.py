"""kvpilot's own /metrics: gauges rendered from the current Snapshot, plus the loop's counters.

Rendering from the snapshot (instead of setting long-lived gauges) means a replica, GPU or finding that is gone
simply stops being exported: no stale label sets, and cardinality never exceeds the fleet's current size.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from api import series as S  # noqa: N812  (the catalogue reads best as S.NAME)
from api.auth import TokenAuth
from api.runtime import RuntimeHealth
from collector.rates import histogram_quantile
from collector.urls import masked_in
from detectors.xid import triage
from kvpilot.runtime.snapshot import Snapshot
from store.fields import redact_url
from store.writers import WriterGate


def _known(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


class _Families:
    def __init__(self) -> None:
        self._by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def add(self, s: S.Series, labels: Iterable[str], value: float | None, *, allow_inf: bool = False) -> None:
        if not (_known(value) or (allow_inf and value == math.inf)):
            return
        fam = self._by_name.get(s.name)
        if fam is None:
            fam = self._by_name[s.name] = (
                # a counter kept by the snapshot (per target): the family's name without `_total`, as the client's
                CounterMetricFamily(s.name.removesuffix("_total"), s.help, labels=list(s.labels))
                if s.type == "counter"
                else GaugeMetricFamily(s.name, s.help, labels=list(s.labels))
            )
        assert value is not None
        fam.add_metric(list(labels), float(value))

    def __iter__(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return iter(self._by_name.values())


def snapshot_families(snap: Snapshot) -> list[GaugeMetricFamily | CounterMetricFamily]:
    f = _Families()
    for r in snap.replicas:
        s = r.sample
        labels = (s.deployment_key, masked_in(s.replica), s.engine)  # a replica on no pod: its URL, secrets masked
        f.add(S.REPLICA_REQUESTS_WAITING, labels, s.requests_waiting)
        f.add(S.REPLICA_REQUESTS_RUNNING, labels, s.requests_running)
        f.add(S.REPLICA_KV_USAGE, labels, s.kv_usage)
    for key, d in snap.deployments.items():
        f.add(S.DEPLOYMENT_POOL, (key, d.pool), 1)
        f.add(S.DEPLOYMENT_REQUESTS_WAITING, (key,), d.requests_waiting)
        f.add(S.DEPLOYMENT_REQUESTS_RUNNING, (key,), d.requests_running)
        f.add(S.DEPLOYMENT_KV_USAGE, (key,), d.kv_usage_mean)
        f.add(S.DEPLOYMENT_KV_USAGE_MAX, (key,), d.kv_usage_max)
        f.add(S.DEPLOYMENT_ARRIVAL_RATE, (key,), d.arrival_rate)
        f.add(S.DEPLOYMENT_TOKENS_RATE, (key, "prompt"), d.prompt_tokens_rate)
        f.add(S.DEPLOYMENT_TOKENS_RATE, (key, "generation"), d.generation_tokens_rate)
        f.add(S.PREFIX_CACHE_HIT_RATIO, (key,), d.prefix_hit_ratio)
        f.add(S.DEPLOYMENT_REPLICAS, (key, "ready"), d.ready_replicas)
        f.add(S.DEPLOYMENT_REPLICAS, (key, "loading"), d.loading_replicas)
        for q in S.TTFT_QUANTILES:
            f.add(S.TTFT_SECONDS, (key, f"{q:g}"), histogram_quantile(q, d.ttft_window))
            f.add(S.ITL_SECONDS, (key, f"{q:g}"), histogram_quantile(q, d.itl_window))
    for key, cost in snap.costs.items():
        labels = (key, cost.pool or "", cost.gpu_type or "")
        f.add(S.COST_USD_PER_HOUR, labels, cost.usd_per_hour)
        f.add(S.COST_USD_PER_MILLION_TOKENS, labels, cost.usd_per_million_tokens)
        f.add(S.COST_GPUS, labels, cost.replicas * cost.gpus_per_replica if cost.gpu_type else None)
        f.add(S.COST_POWER_WATTS, labels, cost.power_w)
        for option in cost.recommendation.options if cost.recommendation else ():
            meets = "true" if option.meets_slo else "false"
            f.add(S.COST_OPTION_USD_PER_HOUR, (key, cost.pool or "", option.gpu_type, meets), option.usd_per_hour)
    for (deployment, replica), seconds in snap.kv_time_to_exhaustion.items():
        f.add(S.KV_TIME_TO_EXHAUSTION, (deployment, masked_in(replica)), seconds, allow_inf=True)  # +Inf: not filling
    for key, dec in snap.decisions.items():
        f.add(S.DESIRED_REPLICAS, (key,), dec.desired_replicas)
        f.add(S.WARM_POOL_REPLICAS, (key,), dec.warm_pool)
        f.add(S.PREDICTIVE_REPLICAS, (key,), dec.predictive_replicas)
        f.add(S.REACTIVE_REPLICAS, (key,), dec.reactive_replicas)
        f.add(S.FORECAST_ARRIVAL_RATE, (key,), dec.forecast.get("arrival_rate"))
        f.add(S.PLANNER_ARRIVAL_RATE, (key,), dec.forecast.get("arrival_rate_now"))
        f.add(S.FORECAST_ARRIVAL_RATE_UPPER, (key,), dec.forecast.get("arrival_rate_upper"))
        for name, value in dec.forecast.items():
            if name.startswith("mase_"):
                f.add(S.FORECAST_ERROR_MASE, (key, name.removeprefix("mase_")), value)
    for finding in snap.findings:
        f.add(S.FINDING_ACTIVE, (finding.kind, finding.severity.value, *finding.alert_labels().values()), 1)
    for g in snap.gpus:
        if not g.present:
            continue
        gpu = g.sample.uuid or g.sample.index
        if g.sample.uuid and g.sample.mig_instance is not None:
            gpu = f"{gpu}/mig{g.sample.mig_instance}"  # MIG instances share their GPU's UUID: one series each
        f.add(S.GPU_UTILISATION, (g.sample.node, gpu), g.sample.utilisation)
        f.add(S.GPU_MEMORY_USED, (g.sample.node, gpu), g.sample.memory_used_bytes)
        f.add(S.GPU_MEMORY_FREE, (g.sample.node, gpu), g.sample.memory_free_bytes)
        if g.sample.last_xid is not None:
            f.add(S.GPU_LAST_XID, (g.sample.node, gpu, triage(g.sample).xid_class.value), g.sample.last_xid)
    for node, state in snap.node_drains.items():
        f.add(S.NODE_DRAIN_STATE, (node, state), 1)
    for url, h in snap.target_health.items():
        shown = redact_url(url)  # /metrics is unauthenticated: never a password in a label
        f.add(S.SCRAPE_UP, (shown,), 1 if h.up else 0)
        f.add(S.SCRAPE_DURATION, (shown,), h.last_scrape_duration_s)
        f.add(S.SCRAPE_PARTIAL_PAGES, (shown,), h.partial_pages_total)  # from 0: an increase() sees the first
    return list(f)


def render_snapshot(snap: Snapshot) -> bytes:
    """The snapshot's gauges in the text exposition format (0.0.4): a pure function of an immutable snapshot, so
    the bytes rendered once stay exact for as long as that snapshot is the current one."""
    return render_text(snapshot_families(snap))


_GO_FLOAT: Callable[[float], str] = floatToGoString  # untyped in prometheus_client


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render_text(families: Iterable[GaugeMetricFamily | CounterMetricFamily]) -> bytes:
    """Gauge and counter families in the text exposition format (0.0.4), byte for byte what prometheus_client's
    ``generate_latest`` writes for them. The catalogue's metric and label names are valid legacy names (tests hold
    it), so what ``generate_latest`` spends on checking and escaping every label name of every sample (~20 % of a
    render) and on its general sample line (~80 % in all, review G F6) is not needed here."""
    out: list[str] = []
    for fam in families:
        name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {fam.type}\n")
        for s in fam.samples:
            if s.labels:
                labels = ",".join([f'{k}="{_escape(v)}"' for k, v in sorted(s.labels.items())])
                out.append(f"{s.name}{{{labels}}} {_GO_FLOAT(s.value)}\n")
            else:
                out.append(f"{s.name} {_GO_FLOAT(s.value)}\n")
    return "".join(out).encode("utf-8")


# Set while ``OwnMetrics.exposition`` renders the registry: the snapshot's gauges come from the bytes rendered once
# for that snapshot, so the registry's snapshot collector yields only the live health series then.
_WITHOUT_SNAPSHOT: contextvars.ContextVar[bool] = contextvars.ContextVar("without_snapshot", default=False)


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot | None], health: Callable[[], RuntimeHealth]) -> None:
        self._snapshot = snapshot
        self._health = health

    def collect(self) -> Iterable[Metric]:
        h = self._health()
        f = _Families()
        f.add(S.STORE_UP, (), 1 if h.store_up else 0)
        f.add(S.STORE_PENDING_WRITES, (), h.store_pending_writes)
        f.add(S.LEADER, (), 1 if h.leader else 0)
        f.add(S.STORE_SQLITE, (), 1 if h.store_sqlite else 0)
        yield from f
        c = CounterMetricFamily(S.STORE_DROPPED_WRITES.name.removesuffix("_total"), S.STORE_DROPPED_WRITES.help)
        c.add_metric([], h.store_dropped_writes)
        yield c
        snap = self._snapshot()
        if snap is not None and not _WITHOUT_SNAPSHOT.get():
            yield from snapshot_families(snap)


class AuthRefusals(Collector):
    """``kvpilot_api_auth_refusals_total{status}`` from the counts ``TokenAuth`` keeps (the API's exception handler
    counts; no registry is needed where the app is built)."""

    def __init__(self, auth: TokenAuth) -> None:
        self._auth = auth

    def collect(self) -> Iterable[Metric]:
        c = CounterMetricFamily(
            S.API_AUTH_REFUSALS.name.removesuffix("_total"), S.API_AUTH_REFUSALS.help, labels=S.API_AUTH_REFUSALS.labels
        )
        for status, n in sorted(self._auth.refusals.items()):
            c.add_metric([str(status)], n)
        yield c


class WritesRefused(Collector):
    """``kvpilot_api_writes_refused_total{reason}`` from the counts SQLite's writer gate keeps (``store.writers``),
    every reason from 0."""

    def __init__(self, gate: WriterGate) -> None:
        self._gate = gate

    def collect(self) -> Iterable[Metric]:
        s = S.API_WRITES_REFUSED
        c = CounterMetricFamily(s.name.removesuffix("_total"), s.help, labels=s.labels)
        for reason, n in self._gate.refused.items():
            c.add_metric([reason], n)
        yield c


class ReadAtScrape(Collector):
    """Series whose values an object keeps as plain numbers (a count, a 0/1 state), read at each scrape: the
    objects count without a registry, as ``WritesRefused``'s gate does."""

    def __init__(self, *series: tuple[S.Series, Callable[[], float]]) -> None:
        self._series = series

    def collect(self) -> Iterable[Metric]:
        for s, read in self._series:
            if s.type == "counter":
                yield CounterMetricFamily(s.name.removesuffix("_total"), s.help, value=read())
            else:
                yield GaugeMetricFamily(s.name, s.help, value=read())


class LoopCounters:
    """kvpilot's own counters (ticks, overruns, scrape failures, decisions, stage errors, drain refusals), in the
    registry that /metrics renders. They depend on nothing, so the wiring builds them first and hands them to the
    loop (``kvpilot.runtime.loop.LoopMetrics``), actuation and the service, before any of those exists."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.tick_seconds = Histogram(
            S.LOOP_TICK_SECONDS.name,
            S.LOOP_TICK_SECONDS.help,
            buckets=S.TICK_BUCKETS_S,
            registry=r,
        )
        self.overruns = Counter(S.LOOP_OVERRUNS.name, S.LOOP_OVERRUNS.help, registry=r)
        self.scrape_failures = Counter(S.SCRAPE_FAILURES.name, S.SCRAPE_FAILURES.help, registry=r)
        self.decisions = Counter(S.DECISIONS.name, S.DECISIONS.help, list(S.DECISIONS.labels), registry=r)
        self.stage_errors = Counter(S.STAGE_ERRORS.name, S.STAGE_ERRORS.help, list(S.STAGE_ERRORS.labels), registry=r)
        self.drain_refusals = Counter(
            S.DRAIN_REFUSALS.name, S.DRAIN_REFUSALS.help, list(S.DRAIN_REFUSALS.labels), registry=r
        )
        for stage in S.LOOP_STAGES:  # exported at 0 from the start: no series would read as "unknown", not "none"
            self.stage_errors.labels(stage)


class OwnMetrics:
    """The registry behind /metrics: the ``LoopCounters`` plus the snapshot-rendered gauges, built by the runtime
    that has the snapshot and the health to render (``kvpilot.runtime.service.Service``).

    ``registry`` alone renders everything at once (``generate_latest``); ``exposition()`` is what /metrics sends
    (through ``page()``, off the event loop): the live series (counters, the store's and the lease's state,
    anything registered later) rendered at the scrape, followed by the snapshot's gauges as ``render_snapshot``
    rendered them for the current snapshot — at its first scrape, then kept until a tick publishes the next one.
    At 10,000 replicas the snapshot's gauges cost 12-15 ms of CPU to render, on the event loop at every scrape
    before (issue 17); then once per tick, in the tick's worker thread, whether anyone scraped or not (~10 % of
    ``kvpilot run``'s CPU at 1,000 targets with nobody scraping, issue 12); now at most once per snapshot, in the
    page's thread, and not at all for the ticks between two scrapes of a Prometheus that scrapes less often than
    the loop ticks. Nothing is older than before: the gauges are exactly those of the current snapshot, and
    counters are read at the scrape, so they never go backwards."""

    def __init__(
        self,
        counters: LoopCounters,
        snapshot: Callable[[], Snapshot | None],
        health: Callable[[], RuntimeHealth],
    ) -> None:
        self.counters = counters
        self._snapshot = snapshot
        self._rendered: tuple[Snapshot, bytes] | None = None
        self._page_thread: ThreadPoolExecutor | None = None
        self.registry = counters.registry
        self.registry.register(_SnapshotCollector(snapshot, health))

    def exposition(self) -> bytes:
        """The whole page for /metrics; the current snapshot's gauges rendered at its first scrape only."""
        token = _WITHOUT_SNAPSHOT.set(True)
        try:
            live = generate_latest(self.registry)
        finally:
            _WITHOUT_SNAPSHOT.reset(token)
        snap = self._snapshot()
        if snap is None:
            return live
        rendered = self._rendered
        if rendered is not None and rendered[0] is snap:
            return live + rendered[1]
        body = render_snapshot(snap)
        self._rendered = (snap, body)  # page() renders in one thread: no other render ran meanwhile
        return live + body

    async def page(self) -> bytes:
        """``exposition()`` in a worker thread of its own: the live series still cost 3-5 ms of CPU at 100
        deployments (the decisions counter), which held the event loop at every scrape; in a thread the loop gets
        the GIL back within a switch interval. Its own thread, not the default executor's: a scrape never queues
        behind threads that a hung store holds."""
        if self._page_thread is None:
            self._page_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-page")
        return await asyncio.get_running_loop().run_in_executor(self._page_thread, self.exposition)
