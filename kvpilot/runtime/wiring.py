"""Builds a ``Service`` from ``Settings``: the one place that knows which concrete part fills each stage.

Every part can be passed in instead (tests pass a VirtualClock, hand-made collectors, a short interval), so the
wiring that runs in production is the wiring the tests run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

import migrations
from api import series as S  # noqa: N812  (the catalogue reads best as S.NAME)
from api.exposition import LoopCounters, ReadAtScrape
from collector.clock import Clock, WallClock
from collector.discovery import Discovery
from collector.scrape import Collector, ScrapeConfig
from collector.state import FleetState
from collector.urls import password_masked
from detectors.drain_rails import DrainRails
from detectors.registry import Detection
from detectors.thresholds import Thresholds
from kvpilot.actuation import Actuation, FleetShare, NoClusterDrainer, SimulatorScaler
from kvpilot.actuation.drain import NodeDrainer
from kvpilot.actuation.scale import make_actuator
from kvpilot.runtime.arrivals import GatewayArrivals, LabelMapping
from kvpilot.runtime.cost import cost_config
from kvpilot.runtime.lease import LeaseElector, Leases, renew_deadline
from kvpilot.runtime.loop import Aggregates, Collect, ControlLoop, Decide, Detect, LoopConfig
from kvpilot.runtime.node_drains import NodeDrains
from kvpilot.runtime.restore import Restored, restore, restore_taken, seed_capacity, vanished_gpus
from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import KubernetesScale, ScaleSource, SimulatorScale
from kvpilot.runtime.service import SPLIT_AFTER_LEASES, Abortable, Campaigns, HasOwnMetrics, SchemaAgain, Service
from kvpilot.runtime.shards import (
    CollectsOwned,
    HoldsShards,
    OwnedCollect,
    OwnedTargets,
    ShardCoordinator,
    Takeover,
)
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.taken_answers import StoredAnswers
from kvpilot.settings import DeploymentScaling, Settings, SettingsError
from scaler.capacity import CapacityConfig, ServingProfile
from scaler.decision import Decision
from scaler.planner import Planner, PlannerConfig
from scaler.planner import planner_config as scaler_planner_config
from scaler.pools import PoolConfig, PooledPlanner, PoolsConfig
from scaler.publish import DecisionBoard, DecisionSource
from scaler.rollout_stage import RolloutStage
from store import repo
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory, transaction
from store.errors import driver_words

if TYPE_CHECKING:
    # The optional stages the loop and the service recognise by protocol (isinstance), checked here by mypy against
    # the classes this root wires in: a renamed method or a changed signature fails the type check, not silently.
    from collector.discovery.promql import PromQLSource

    _promql: tuple[type[Aggregates], type[HasOwnMetrics], type[Abortable], type[CollectsOwned]] = (
        PromQLSource,
        PromQLSource,
        PromQLSource,
        PromQLSource,
    )
    _owned: type[Aggregates] = OwnedCollect
    _scraping: type[Abortable] = Collector
    _campaigns: tuple[type[Campaigns], type[Campaigns]] = (LeaseElector, ShardCoordinator)

log = logging.getLogger(__name__)


def _require_head(url: str) -> None:
    """With auto-migration off, refuse to run against a schema this version does not know."""
    try:
        current = migrations.current(url)
    except SQLAlchemyError:
        return  # unreachable: the service starts and buffers until the store is back
    if current != migrations.head():
        raise SettingsError(
            f"store.auto_migrate is off and the database is at {current or 'an empty schema'}, this kvpilot needs "
            f"{migrations.head()}: run `kvpilot db upgrade`"
        )


def schema_again(url: str, after_s: float) -> SchemaAgain:
    """With ``store.auto_migrate``: the store's schema created again where the database answers with none for
    ``after_s`` (``store.recreate_after_s``), as the upgrade at start does: under the migration lock, so that two
    kvpilots that find the same empty database create it once, and only the one that did says so (``Service``'s
    store probe looks while writes fail; the look before the lock spares the lock where a schema is there)."""
    return SchemaAgain(
        missing=lambda: migrations.current(url) is None,
        create=lambda: migrations.create_if_empty(url),
        after_s=after_s,
    )


def capacity_config(scaling: DeploymentScaling) -> CapacityConfig:
    p = scaling.profile
    profile = None if p is None else ServingProfile(**p.model_dump())
    return CapacityConfig(profile=profile, requests_per_s=scaling.capacity_rps)


def planner_config(settings: Settings, scaling: DeploymentScaling) -> PlannerConfig:
    """The planner configuration of `kvpilot run` for one deployment: the one function that `kvpilot demo` and
    `kvpilot backtest --policies kvpilot` use too."""
    chosen = {k: v for k, v in settings.scaler.planner.model_dump().items() if v is not None}
    return scaler_planner_config(
        cold_start_s=settings.scaler.cold_start_s,
        tick_s=settings.collector.interval_s,
        horizon_s=settings.scaler.horizon_s,
        rate_window_s=settings.collector.rate_window_s,
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        capacity=capacity_config(scaling),
        **chosen,
    )


def build_planner(settings: Settings) -> Planner | PooledPlanner:
    """The planner of every deployment; the pools of disaggregated ones (docs/disaggregated.md) are sized per pool
    where a serving profile says what a replica is (each pool's `scaler.pools` entry over the default profile,
    cold start and bounds), else decided like any deployment."""
    overrides = {k: planner_config(settings, v) for k, v in settings.scaler.deployments.items()}
    default = planner_config(settings, settings.scaler.default)
    planner = Planner(default, overrides=overrides)
    # The pools' burst floor reads a 30 s peak of prompt tokens (docs/disaggregated.md), measured as an option: on
    # only where the setting says so, not by the co-located default.
    pool_policy = dataclasses.replace(default.policy, burst_floor=settings.scaler.planner.burst_floor is True)

    def pool(name: str) -> PoolConfig | None:
        own = settings.scaler.pools.get(name)  # type: ignore[call-overload]
        if own is None:
            profile = default.capacity.profile
            return None if profile is None else PoolConfig(
                profile, cold_start_s=default.cold_start_s, scaling_delay_s=default.scaling_delay_s,
                policy=pool_policy,
            )  # fmt: skip
        profile = default.capacity.profile if own.profile is None else ServingProfile(**own.profile.model_dump())
        if profile is None:
            return None
        bounds = {
            k: v for k, v in (("min_replicas", own.min_replicas), ("max_replicas", own.max_replicas)) if v is not None
        }
        cold = default.cold_start_s if own.cold_start_s is None else own.cold_start_s
        return PoolConfig(
            profile, cold_start_s=cold, scaling_delay_s=default.scaling_delay_s,
            policy=dataclasses.replace(pool_policy, **bounds),
        )  # fmt: skip

    prefill, decode = pool("prefill"), pool("decode")
    if prefill is None or decode is None:
        return planner
    # Dynamo's SLA planner default ITL target (scaler.pools; bench/disagg.py cites it), or two batch-1 steps of a
    # profile too slow for it.
    itl = max(0.05, 2 * decode.profile.decode_step_s)
    ttft = default.slo_ttft_s or 2.0
    return PooledPlanner(planner, PoolsConfig(prefill, decode, ttft_target_s=ttft, itl_target_s=itl))


def build_collector(settings: Settings, clock: Clock, sleep: Any = None) -> Collector:
    """The scrape step of `kvpilot run`'s loop: targets spread over the interval, the page cap and timeout from
    settings, pages read off the event loop (bench/scrape.py runs this same collector)."""
    c = settings.collector
    scrape = ScrapeConfig.for_interval(
        c.interval_s, c.timeout_s, max_bytes=c.max_body_bytes, max_concurrency=c.concurrency
    )
    return Collector(scrape, clock=clock, **({"sleep": sleep} if sleep is not None else {}))


def _open_store(settings: Settings, sources: Sources, clock: Clock) -> tuple[Engine, sessionmaker[Session], Restored]:
    """The schema upgraded (or checked), the engine and its sessions, what a previous run left, and the static
    targets added through the API; an unreachable store is logged here and buffered for later, never fatal."""
    url = settings.database_url
    if settings.store.auto_migrate:
        migrations.upgrade(url)
    else:
        _require_head(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    restored = restore(sessions, now=clock.now(), history_s=settings.scaler.warm_start_s)
    sources.static.attach(sessions, clock)
    try:
        log.info("restored %d static targets added through the API", sources.static.load())
    except SQLAlchemyError as e:
        log.error("store unreachable at start: API-added targets not restored: %s", driver_words(e))
    return engine, sessions, restored


def _latest_decisions(sessions: sessionmaker[Session]) -> dict[str, Decision]:
    """The newest stored decision of every deployment (``Takeover``: read when a shard is taken); a read-only unit,
    so on SQLite it does not wait for a writer's lock."""
    with transaction(sessions, reads_only=True) as s:
        return repo.latest_decisions(session=s)


def _resume_taken(
    sessions: sessionmaker[Session],
    clock: Clock,
    history_s: float,
    state: FleetState,
    planner: Decide,
    ours: Callable[[str], bool],
) -> Callable[[], None]:
    """A shard taken over mid-run resumes what a restart restores (``Takeover.resumes``): the GPUs its open
    ``vanished`` findings name, tracked absent, and its deployments' learned capacity, through the restart's functions.
    Read in the takeover's store thread; the returned step seeds them in the loop's."""
    taken = restore_taken(sessions, now=clock.now(), history_s=history_s, ours=ours)

    def seed() -> None:
        gpus = state.seed_absent(vanished_gpus(taken.findings))
        learned = seed_capacity(planner, taken.capacities)
        if gpus or learned:
            log.info("shards taken: %d vanished GPUs and the learned capacity of %d deployments resumed", gpus, learned)

    return seed


def _scrape_stages(
    settings: Settings,
    sources: Sources,
    clock: Clock,
    *,
    shards: HoldsShards | None,
    collector: Collect | None,
    sleep: Any,
) -> tuple[Discovery, Collect]:
    """The loop's discover and collect stages: those given or the sources' (PromQL), else the scrape collector;
    with sharding, each narrowed to this instance's deployments (``shards``: the tick's, ``Takeover``)."""
    discovery: Discovery = sources.discovery if shards is None else OwnedTargets(sources.discovery, shards)
    if collector is None:
        collector = sources.collector
        if collector is not None and shards is not None:  # PromQL reads the whole fleet: keep our deployments
            collector = OwnedCollect(collector, shards)
    if collector is None:
        collector = build_collector(settings, clock, sleep)
    return discovery, collector


def build_service(
    settings: Settings,
    sources: Sources,
    *,
    clock: Clock | None = None,
    collector: Collect | None = None,
    detection: Detect | None = None,
    planner: Decide | None = None,
    board: Any = None,
    sleep: Any = None,
    leadership: Any = None,
    actuation: Any = None,
    scale: Any = None,
    rollout: Callable[[Thresholds], RolloutStage] | None = None,
    arrivals: Any = None,
) -> tuple[Service, Restored]:
    """A ready-to-start service and what it restored from the store (schema upgraded first if configured).
    ``rollout``: the loop's rollout stage made from the detectors' thresholds (``kvpilot.demo.rollout.SurgeOff``:
    `kvpilot demo --no-surge`); None: ``scaler.rollout_stage.RolloutStage``. ``arrivals``: the gateway's counter
    (``kvpilot.runtime.loop.ArrivalsSource``); None: ``collector.arrivals``."""
    clock = clock or WallClock()
    engine, sessions, restored = _open_store(settings, sources, clock)
    c = settings.collector
    thresholds = settings.detectors.thresholds(tick_s=c.interval_s)
    if detection is None:
        detection = Detection(thresholds, only=settings.detectors.only, restore=restored.findings)
    if leadership is None and settings.sharding.enabled:
        leadership = build_shards(settings, clock)
    shards = leadership if isinstance(leadership, ShardCoordinator) else None
    # a shard taken over resumes the raise its old holder stored, before the loop decides its deployments; the
    # shards a tick found held at its start are the ones it scrapes and decides, whatever a Lease round does meanwhile
    takeover = (
        None
        if shards is None
        else Takeover(shards, partial(_latest_decisions, sessions), timeout_s=settings.store.hang_after_s)
    )
    discovery, collector = _scrape_stages(settings, sources, clock, shards=takeover, collector=collector, sleep=sleep)
    writer = BufferedWriter(sessions, max_pending=settings.store.buffer_max_writes)
    counters = LoopCounters()  # first: the loop, actuation and the service count into them; they read none of those
    file = sources.targets_file
    if file is not None:  # its kept reads, counted where the file is read
        counters.registry.register(
            ReadAtScrape(
                (S.TARGETS_FILE_READS_KEPT, lambda: file.kept_total), (S.TARGETS_FILE_UNREAD, lambda: int(file.unread))
            )
        )
    node_drains = NodeDrains()  # the service's actuator task writes it, the loop reads it into each snapshot
    board = board if board is not None else DecisionBoard()
    state = FleetState(rate_window_s=c.rate_window_s, history_s=c.history_s, stale_after_s=c.stale_after_s)
    # the GPUs the restored open findings say vanished: known gone, so those findings stay open (their drains too)
    state.seed_absent(vanished_gpus(restored.findings))
    loop = ControlLoop(
        clock=clock,
        state=state,
        discovery=discovery,
        collector=collector,
        detection=detection,
        planner=planner or build_planner(settings),
        board=board,
        writer=writer,
        metrics=counters,
        node_drains=node_drains.current,
        config=LoopConfig(
            interval_s=c.interval_s,
            retention_s=settings.store.retention_days * 86400.0,
            drains_kept_s=settings.drains.budget_window_s if settings.drains.budget > 0 else 0.0,
            kv=thresholds.kv,
        ),
        scale=scale if scale is not None else build_scale(settings, sources),
        managed=tuple(settings.scaler.deployments),
        owns=takeover.owns if takeover is not None else None,
        rollout=None if rollout is None else rollout(detection.thresholds),
        cost=cost_config(settings),
        arrivals=arrivals if arrivals is not None else build_arrivals(settings, sources.collector),
    )
    gateway = loop.arrivals
    if isinstance(gateway, GatewayArrivals) and gateway.max_sample_age_s is not None:  # whether ages are read, and how
        counters.registry.register(
            ReadAtScrape(
                (S.ARRIVALS_SAMPLE_AGE_READ, lambda: int(gateway.timed)),
                (S.ARRIVALS_CLOCK_OFFSET, lambda: gateway.clock_offset_s),
            )
        )
    decisions: DecisionSource = board  # what KEDA reads (runner.keda_reader)
    if takeover is not None and shards is not None:
        loop.takes_over = takeover.take
        # KEDA's calls for a shard just taken are answered from its stored decisions until the loop decides them
        heartbeat_s = loop.config.decision_heartbeat_s
        answers = StoredAnswers(
            board, shards, partial(_latest_decisions, sessions), clock=clock.now, rewritten_every_s=heartbeat_s
        )
        shards.on_gain = answers.read_taken
        # the shards' Leases say until when their stored decisions were in force, for the instance that takes one
        shards.in_force = partial(loop.writes.through.by_shard, shards.shard)
        takeover.answers = decisions = answers
        counters.registry.register(ReadAtScrape((S.KEDA_STORED_ANSWERS, lambda: answers.served_total)))
        # what a restart restores besides the decisions (G1, G2), for the shards taken over mid-run
        takeover.resumes = partial(_resume_taken, sessions, clock, settings.scaler.warm_start_s, state, loop.planner)
    # the capacity a previous run learned (within scaler.warm_start_s): a restart during a burst sizes, not holds
    if restored.capacities:
        log.info("restored the learned capacity of %d deployments", seed_capacity(loop.planner, restored.capacities))
    extra: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
    if leadership is None and settings.ha.enabled:
        leadership = build_elector(settings, clock)
    if leadership is not None and shards is None:  # HA replicas: the findings are the Lease holder's to write
        elector = leadership
        loop.writes_findings = lambda: bool(elector.leader)
    if shards is not None:  # sharded: the instances' views of one finding are told apart (store.repo.findings)
        loop.reporter = shards.identity
    if actuation is None:
        actuation = build_actuation(
            settings,
            sources,
            sessions,
            clock,
            on_refusal=lambda node, rail: counters.drain_refusals.labels(node, rail).inc(),
            # a pod kvpilot evicts is no rollout's drain; noted on the stage's step-free time (the drainer's wall
            # reading is not)
            on_evict=lambda pod, _now: loop.rollout.note_removed(pod, loop.timer_now()),
            identity=None if shards is None else shards.identity,
        )
    service = Service(
        clock=clock,
        loop=loop,
        engine=engine,
        sessions=sessions,
        writer=writer,
        counters=counters,
        node_drains=node_drains,
        targets=sources.static,
        interval_s=c.interval_s,
        max_body_bytes=settings.api.max_body_bytes,
        drain_dry_run=settings.drains.dry_run,
        drain_max_concurrent=settings.drains.max_concurrent,
        drain_budget=settings.drains.budget,
        drain_budget_window_s=settings.drains.budget_window_s,
        leadership=leadership,
        actuation=actuation,
        decisions=decisions,
        renew_every_s=settings.ha.renew_every_s,
        split_after_s=SPLIT_AFTER_LEASES * settings.ha.lease_duration_s,
        store_probe_every_s=settings.store.probe_every_s,
        store_hang_s=settings.store.hang_after_s,
        schema_again=(
            schema_again(settings.database_url, settings.store.recreate_after_s)
            if settings.store.auto_migrate
            else None
        ),
        **extra,
    )
    return service, restored


def _kube_api_client(*, retries: bool = True) -> Any:
    """The official client's configuration: in-cluster first, else the local kubeconfig. ``retries=False`` for Lease
    calls: a call is one try within its timeout (the next round is the retry); urllib3's default three retries, on the
    path that still goes through it (a proxy, socket options, an SNI name), made a silent API server cost four
    timeouts, past the lease a round must end within. Also for direct scaling and drains: they obey a 429's
    Retry-After three times, unbounded (`Retry-After: 30` held one scaling call, or a drain, for 90 s)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as e:
            raise SettingsError(
                f"a Kubernetes API is needed (ha.enabled, scaler.mode=direct or drains) but: {e}"
            ) from e
    if retries:
        return client.ApiClient()
    configuration = client.Configuration.get_default_copy()
    configuration.retries = False
    return client.ApiClient(configuration)


def build_scale(settings: Settings, sources: Sources) -> ScaleSource | None:
    """Where replica counts (zero included) come from: the simulator's control API, the Deployments on the cluster,
    or, for a PromQL fleet, kube-state-metrics' Deployment series in the same Prometheus (through the PromQL
    source's client); None for static fleets and PromQL without kube-state-metrics (decisions follow the replicas
    seen)."""
    d = settings.collector.discovery
    if sources.simulator_url is not None:
        return SimulatorScale(sources.simulator_url)
    if d.kind == "kubernetes":
        from kubernetes import client

        return KubernetesScale(client.AppsV1Api(_kube_api_client()))
    promql = sources.collector
    if d.kind == "promql" and d.promql_kube_state_metrics and promql is not None:
        return KubeStateMetricsScale(
            promql.query_vector, selector=promql.extra_selector, max_matcher_bytes=promql.max_matcher_bytes
        )
    return None


def build_arrivals(settings: Settings, promql: Any = None) -> GatewayArrivals | None:
    """A gateway's request counter per deployment (``collector.arrivals``); None for ``engines``. ``promql``: the
    PromQL collect stage where discovery is ``promql``, whose client serves when the arrivals are read from the same
    Prometheus (else one of their own: ``collector.timeout_s`` bounds each read, ``max_answer_bytes`` its answer)."""
    a, c = settings.collector.arrivals, settings.collector
    if a.source != "promql":
        return None
    url = str(a.promql_url or c.discovery.promql_url)
    close = None
    if promql is not None and getattr(promql, "url", None) == url.rstrip("/"):
        source = promql
    else:
        from collector.discovery.promql import PromQLSource

        source = PromQLSource(url, reader="thread", timeout_s=c.timeout_s, max_answer_bytes=a.max_answer_bytes)
        close = source.aclose
    mapping = LabelMapping(a.deployment_label, a.namespace_label, a.namespace, dict(a.deployments))
    log.info("arrivals per deployment: the gateway's counter %r through %s", a.query[:200], password_masked(url))
    return GatewayArrivals(
        source.query_vector,
        a.query,
        mapping,
        window_s=c.rate_window_s,
        replica_labels=c.discovery.promql_replica_labels,
        max_sample_age_s=a.max_sample_age_s,
        close=close,
        server_clock_offset_s=lambda: getattr(source, "server_clock_offset_s", None),
    )


def lease_call_timeout_s(lease_duration_s: float) -> float:
    """Each Lease call's timeout: a third of the lease, so that a round of a read and a write that both time out
    still ends inside the lease it renews (client-go's renew deadline is 2/3 of the lease by default)."""
    return lease_duration_s / 3


def build_elector(settings: Settings, clock: Clock, api_client: Any = None) -> LeaseElector:
    ha = settings.ha
    api = Leases(api_client or _kube_api_client(retries=False), timeout_s=lease_call_timeout_s(ha.lease_duration_s))
    return LeaseElector(
        api,
        name=ha.lease_name,
        namespace=ha.lease_namespace,
        identity=ha.identity,
        clock=clock,
        lease_duration_s=ha.lease_duration_s,
        deadline=renew_deadline(ha.lease_duration_s, ha.renew_every_s),
    )


def build_shards(settings: Settings, clock: Clock, api_client: Any = None) -> ShardCoordinator:
    """This instance's side of sharding; its KEDA address is set again once the gRPC port is bound (runner)."""
    if settings.keda.tls_cert_file is not None:
        raise SettingsError(
            "sharding.shards > 1 with keda.tls_cert_file: forwarding KEDA calls between shards does not speak TLS "
            "yet; serve KEDA without TLS inside the cluster, or run one instance"
        )
    ha, sh = settings.ha, settings.sharding
    return ShardCoordinator(
        Leases(api_client or _kube_api_client(retries=False), timeout_s=lease_call_timeout_s(ha.lease_duration_s)),
        lease_name=ha.lease_name,
        namespace=ha.lease_namespace,
        identity=ha.identity,
        address=sh.advertise_address or advertised_address(settings.api.grpc_port),
        shards=sh.shards,
        clock=clock,
        lease_duration_s=ha.lease_duration_s,
        deadline=renew_deadline(ha.lease_duration_s, ha.renew_every_s),
    )


def advertised_address(port: int) -> str:
    """Where the other instances reach this one: the pod IP (the Downward API's ``POD_IP``), else the hostname."""
    import os
    import socket

    host = os.environ.get("POD_IP") or socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# Drains go through the Kubernetes API only where the fleet has one: each setting that gives it one, in words.
ON_CLUSTER: tuple[tuple[str, Callable[[Settings], bool]], ...] = (
    ("collector.discovery.kind kubernetes", lambda s: s.collector.discovery.kind == "kubernetes"),
    ("ha.enabled", lambda s: s.ha.enabled),
    ("sharding.shards above 1", lambda s: s.sharding.enabled),
)


def drains_on_cluster(settings: Settings) -> tuple[bool, str]:
    """Whether drains go through the Kubernetes API (any of ``ON_CLUSTER`` holds), and the rule in words, with the
    settings that broke it where none holds: one rule, read and said from here."""
    *first, last = (words for words, _ in ON_CLUSTER)
    rule = f"kvpilot drains through the Kubernetes API only with {', '.join(first)} or {last}"
    if any(holds(settings) for _, holds in ON_CLUSTER):
        return True, rule
    return False, f"{rule} (here: discovery {settings.collector.discovery.kind}, neither HA nor sharding)"


def build_actuation(
    settings: Settings,
    sources: Sources,
    sessions: Any,
    clock: Clock,
    *,
    on_refusal: Callable[[str, str], None] | None = None,
    on_evict: Callable[[str, float], None] | None = None,
    identity: str | None = None,
) -> Actuation:
    """Drains through the rails (on the cluster when there is one) and, in ``direct`` mode, scaling. ``on_evict``
    is told each pod a drain evicts ("namespace/name", now): the rollout stage's ``note_removed``. ``identity``: a
    sharded instance's; its circuit breaker then counts the fleet's nodes (``kvpilot.actuation.FleetShare``: its
    node set kept in the store, refreshed every lease period, a set unrefreshed for 3 lease periods not counted)."""
    d = settings.drains
    lease_s = settings.ha.lease_duration_s
    rails = DrainRails(dry_run=d.dry_run, max_concurrent_nodes=d.max_concurrent, breaker_share=d.breaker_share,
                       budget=d.budget, budget_window_s=d.budget_window_s)  # fmt: skip
    on_cluster, why = drains_on_cluster(settings)
    drainer: Any
    if on_cluster:
        from kubernetes import client

        # one try a request: the drainer waits out a Retry-After itself, within request_timeout_s and heeding a cancel
        drainer = NodeDrainer(client.CoreV1Api(_kube_api_client(retries=False)), clock=clock, on_evict=on_evict)
    else:
        drainer = NoClusterDrainer(clock, why=why)
        if not d.dry_run:  # the operator asked for real drains, and every one will fail: say so before the first
            log.warning("drains.dry_run is false, but every drain will fail: %s", drainer.why)
    scaler: Any = None
    if settings.scaler.mode == "direct":
        if sources.simulator_url is not None:
            scaler = SimulatorScaler(sources.simulator_url)
        else:
            from kubernetes import client

            # one try a request: the actuator waits out a 429's Retry-After itself, within its request_timeout_s
            scaler = make_actuator("direct", apps=client.AppsV1Api(_kube_api_client(retries=False)))
    return Actuation(
        sessions=sessions,
        clock=clock,
        rails=rails,
        drainer=drainer,
        require_approval=d.require_approval,
        scaler=scaler,
        on_refusal=on_refusal,
        fleet=None if identity is None else FleetShare(identity, stale_after_s=3 * lease_s, refresh_every_s=lease_s),
    )
