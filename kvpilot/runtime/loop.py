"""One tick of the control loop: discover → collect → FleetState.observe → arrivals → scale → detect → decide →
persist → publish.

The scale stage (a ``kvpilot.runtime.scale_view.ScaleSource``, where there is one) says how many replicas every known
deployment runs, zero included: the planner decides each of them even when the collector sees no replica (scaled
to zero, or loading after scale-from-zero), and a deployment the source reports deleted is forgotten (its
decision leaves the board, so KEDA gets NOT_FOUND, and the planner drops its state). The arrivals stage (a
``kvpilot.runtime.arrivals.GatewayArrivals``, where ``collector.arrivals`` names a gateway's counter) hands the planner
the gateway's rate and count of each deployment it names, at zero replicas too, in place of the engines' estimate.

Each stage is an injected interface, so the real collector, detectors and planner plug in, and tests drive the
loop with a ``VirtualClock`` and hand-made stages. A stage that raises is counted and logged and the tick goes on
with what it has: a detector bug must not stop scaling, and a store outage must not stop either (writes go to
the bounded ``BufferedWriter``). On shutdown, ``abandon()`` ends the tick in progress at once if it has not reached
its persist stage (``kvpilot.runtime.stopping``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from prometheus_client import Counter, Histogram

from collector.aggregates import DeploymentAggregate
from collector.clock import Clock, StepFreeTime
from collector.discovery import Discovery, DiscoveryUnavailable
from collector.promql.decode import LAYOUT_ERRORS, PromQLError
from collector.samples import TargetInfo
from collector.scrape import CollectResult
from collector.state import FleetState, replica_key
from detectors.finding import Finding
from detectors.hysteresis import Transitions
from detectors.kv_exhaustion import Demand, time_to_exhaustion_s
from detectors.kv_trend import KvTrends
from detectors.stuck_gpu import gpu_subject, physical_subject
from detectors.thresholds import KvThresholds, Thresholds
from kvpilot.runtime.arrivals import Arrivals
from kvpilot.runtime.persist import TickWrites
from kvpilot.runtime.planner_hints import demand_hints
from kvpilot.runtime.scale_view import ScaleSource, ScaleView
from kvpilot.runtime.snapshot import Snapshot
from kvpilot.runtime.stopping import Abandon, Abortable, in_daemon_thread
from scaler.cost import CostConfig, DeploymentCost, discovered_gpus, fleet_costs
from scaler.decision import Decision
from scaler.own_raise import OwnRaise
from scaler.planner import replica_count
from scaler.rollout_stage import RolloutStage
from store.buffer import BufferedWriter
from store.repo.findings import Reporter

log = logging.getLogger(__name__)

T = TypeVar("T")


class Collect(Protocol):
    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult: ...


@runtime_checkable
class Aggregates(Protocol):
    """What a collect stage that also reads per-deployment sums offers (``collector.discovery.promql.PromQLSource``
    in its aggregates mode, ``kvpilot.runtime.shards.OwnedCollect`` around it): those of its last collect."""

    @property
    def last_aggregates(self) -> Sequence[DeploymentAggregate]: ...


class Detect(Protocol):
    """``detectors.registry.Detection``: detectors plus hysteresis, and what the loop reads from it: its thresholds
    (the rollout stage's), the KV trends it fits each tick (the exported projection reuses them) and the planner's
    demand it is handed after each decision."""

    thresholds: Thresholds
    kv_trends: KvTrends

    def set_demand(self, demand: Mapping[str, Demand]) -> None: ...

    def set_replicas_asked(self, counts: Mapping[str, int]) -> None: ...

    def tick(self, state: FleetState, *, now: float) -> Transitions: ...

    def active(self) -> list[Finding]: ...


class Decide(Protocol):
    """``scaler.planner.Planner``: decides every deployment in ``state`` and every key of ``current_replicas``, and
    drops what it keeps for a deployment that was deleted or whose shard moved (``forget``)."""

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
    ) -> list[Decision]: ...

    def forget(self, key: str) -> None: ...


@runtime_checkable
class Remembers(Protocol):
    """What a planner that keeps per-deployment models offers beyond deciding (``scaler.planner.Planner``,
    ``scaler.pools.PooledPlanner``): stored rates to warm its forecasters, and the capacity it works with."""

    def warm(self, key: str, t: float, arrival_rate: float) -> None: ...

    def capacity(self, key: str) -> tuple[float, str] | None: ...


class ArrivalsSource(Protocol):
    """``kvpilot.runtime.arrivals.GatewayArrivals``: a gateway's request counter per deployment, read each tick."""

    async def read(self, now: float, at: float) -> Arrivals: ...


class Publish(Protocol):
    """``scaler.publish.DecisionBoard``."""

    def publish(self, decision: Decision) -> object: ...

    def forget(self, deployment: str) -> None: ...


class LoopMetrics(Protocol):
    """The counters the loop increments (``api.exposition.LoopCounters``, in the registry /metrics renders); named
    here so that the loop needs nothing of the API."""

    tick_seconds: Histogram
    overruns: Counter
    scrape_failures: Counter
    decisions: Counter  # labels: deployment, reason
    stage_errors: Counter  # labels: stage


NO_ARRIVALS = Arrivals()
# Deployments only the gateway names (kvpilot has not counted them) asked of the scale source a tick, the busiest
# first: a mapping that names what are no Deployments (50,000 paths) would otherwise ask for every one, every tick
GATEWAY_ONLY_ASKED = 256


@dataclass(frozen=True, slots=True)
class LoopConfig:
    interval_s: float = 5.0
    retention_s: float = 30 * 86400.0
    drains_kept_s: float = 0.0  # drains started this recently stay whatever retention_s (drains.budget_window_s)
    prune_every_s: float = 3600.0
    decision_heartbeat_s: float = 60.0  # an unchanged decision is still stored this often
    kv: KvThresholds = field(default_factory=KvThresholds)


class FirstSeen:
    """Whether an exception is the first from its line of code (its type and innermost frame; ``limit`` remembered)."""

    def __init__(self, limit: int = 64) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._limit = limit

    def first(self, e: BaseException) -> bool:
        frames = traceback.extract_tb(e.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else str(e)[:200]
        remote = e.__cause__  # raised in a reader process: its traceback comes as text (concurrent.futures')
        if remote is not None and type(remote).__name__ == "_RemoteTraceback":
            lines = [line.strip() for line in str(remote).splitlines() if line.strip().startswith('File "')]
            where = lines[-1] if lines else where
        key = (type(e).__name__, where)
        if key in self._seen or len(self._seen) >= self._limit:
            return False
        self._seen.add(key)
        return True


class ControlLoop:
    def __init__(
        self,
        *,
        clock: Clock,
        state: FleetState,
        discovery: Discovery,
        collector: Collect,
        detection: Detect,
        planner: Decide,
        board: Publish,
        writer: BufferedWriter,
        metrics: LoopMetrics,
        config: LoopConfig,
        node_drains: Callable[[], dict[str, str]] = dict,
        scale: ScaleSource | None = None,
        managed: Collection[str] = (),
        owns: Callable[[str], bool] | None = None,
        rollout: RolloutStage | None = None,
        cost: CostConfig | None = None,
        arrivals: ArrivalsSource | None = None,
    ) -> None:
        self.clock = clock
        self.state = state
        self.discovery = discovery
        self.collector = collector
        # judged once: a source either sums per deployment or not (reading an OwnedCollect's sums filters them)
        self._aggregates: Aggregates | None = collector if isinstance(collector, Aggregates) else None
        self.detection = detection
        self.planner = planner
        self.board = board
        self.writer = writer
        self.metrics = metrics
        self.config = config
        self.node_drains = node_drains
        self.scale = scale
        # A gateway's request counter (collector.arrivals): its rate and count per deployment it names, where the
        # planner would read the engines' estimate. Handed as arrivals_totals only to a planner that takes them.
        self.arrivals = arrivals
        takes = inspect.signature(planner.decide).parameters
        self._takes_totals = "arrivals_totals" in takes or any(p.kind is p.VAR_KEYWORD for p in takes.values())
        # After the planner: a rollout's surge on top of its decision (scaler.rollout_stage).
        self.rollout = rollout if rollout is not None else RolloutStage(detection.thresholds)
        self.own_raise = OwnRaise()  # what the rollout stage added to the planner's count (scaler.own_raise)
        # The planner's time: its forecasters refuse a point stamped before their last, and its windows and holds age
        # on it, so a step of the wall clock is taken out of it (its decisions are stamped on the wall clock). The
        # memory of kvpilot's own raise ages on it too, and so do FleetState's samples (stale, down, forgotten).
        self._planner_time = StepFreeTime()
        self._known: set[str] = set(managed)  # deployments whose replica count the scale source is asked for
        self._said_named = False  # said once: the gateway names more unknown deployments than are asked
        self.owns = owns  # sharding (kvpilot.runtime.shards): this instance decides only the deployments of its shards
        # sharding (kvpilot.runtime.shards.Takeover): at each tick's start, the stored decisions of a shard just taken
        self.takes_over: Callable[[], Awaitable[Sequence[Decision]]] | None = None
        # HA replicas (kvpilot.runtime.wiring): whether this one writes the findings now, the Lease holder alone
        self.writes_findings: Callable[[], bool] | None = None
        # sharding (kvpilot.runtime.wiring): this instance's name, with which it signs its view of a finding
        self.reporter: str | None = None
        self.cost = cost  # what each deployment costs, in the snapshot (scaler.cost); None: not computed
        self.tick_count = 0
        self.latest: Snapshot | None = None
        self._abandon = Abandon()
        self._causes = FirstSeen()
        self._targets: list[TargetInfo] = []
        self._engine_keys: set[str] = set()  # replicas discovery listed last tick
        self._counted: dict[str, set[str]] = {}  # kvpilot_decisions_total's reasons of each deployment decided
        self.writes = TickWrites(
            writer,
            retention_s=config.retention_s,
            drains_kept_s=config.drains_kept_s,
            prune_every_s=config.prune_every_s,
            decision_heartbeat_s=config.decision_heartbeat_s,
        )

    def timer_now(self) -> float:
        """The planner's step-free time now (``StepFreeTime``), which the rollout stage's timers also run on: what
        a pod kvpilot evicts is noted at (the drain worker's ``on_evict``). Safe from any thread."""
        return self._planner_time.at(self.clock.now(), self.clock.monotonic())

    def resume(self, decisions: dict[str, Decision]) -> None:
        """Start from the decisions a previous run stored: published at once, not re-stored unless they change."""
        self.writes.stored = dict(decisions)
        for d in decisions.values():
            self.board.publish(d)
        # a raise published again is kvpilot's own, as it was for the instance that stored it (scaler.own_raise)
        self.own_raise.resume(decisions.values(), self.timer_now())
        if self.scale is not None:  # a deployment at zero replicas when kvpilot restarted is still managed
            self._known |= set(decisions)

    def abandon(self) -> None:
        """Shutdown: the tick in progress, if it has not reached its persist stage, ends at once with
        ``TickAbandoned`` (its stage's work is cancelled, or left to end in its thread), and so does every later
        tick; a collect stage that can drops its queries and its reader at once. A tick past persist finishes: its
        writes are queued, and the store writer flushes them."""
        self._abandon.set()
        if isinstance(self.collector, Abortable):
            self.collector.abort()

    def _guard(self, stage: str, fn: Callable[[], T], default: T) -> T:
        try:
            return fn()
        except Exception:
            self.metrics.stage_errors.labels(stage).inc()
            log.exception("control loop stage %r failed; the tick continues without it", stage)
            return default

    async def _off_loop(self, stage: str, fn: Callable[[], T], default: T) -> T:
        """A CPU-heavy stage (observe, detect, decide) in a worker thread: the event loop keeps answering the HTTP API
        and KEDA's gRPC calls while it runs (issue 17: at 10,000 replicas each stage held the loop for 0.1-0.2 s).
        The tick awaits it, so stages keep their order; nothing else mutates FleetState, the detectors or the
        planner meanwhile (the API reads the immutable Snapshot). A daemon thread, not the default executor's: on
        shutdown the tick stops waiting for it (``abandon``) and the process exits without waiting either."""
        self._abandon.check(stage)
        work = in_daemon_thread(partial(self._guard, stage, fn, default), name=f"tick-{stage}")
        return await self._abandon.race(stage, work)

    async def tick(self) -> Snapshot:
        started = time.perf_counter()
        if self.owns is not None:
            if self.takes_over is not None:  # the raise its old holder stored is kvpilot's own (scaler.own_raise)
                taken = await self._abandon.race("discover", self.takes_over())
                self.own_raise.resume(taken, self.timer_now())
            self._release_unowned(self.owns)
        self._targets = await self._abandon.race("discover", self._discover())
        result = await self._abandon.race("collect", self._collect())
        now = self.clock.now()
        planner_now = self._planner_time.at(now, self.clock.monotonic())
        self.metrics.scrape_failures.inc(sum(1 for r in result.results if not r.ok))
        # Replicas whose targets discovery stopped listing were scaled down or deleted: forget them at once.
        engine_keys = {replica_key(t.namespace, t.pod) for t in self._targets if t.kind == "engine" and t.pod}
        departed, self._engine_keys = self._engine_keys - engine_keys, engine_keys
        if self.owns is not None:
            # A shard handed over takes its replicas with it. Discovery cannot say so when the collect stage
            # discovers (PromQL narrowed to our shards: a replica read in the tick a shard was held never was a
            # target before it), and FleetState would keep them, and the planner decide them, until they aged out.
            owns = self.owns
            departed |= {v.key for v in self.state.replicas() if not owns(v.deployment_key)}
        await self._off_loop(
            "observe",
            lambda: self.state.observe(
                result.replicas,
                result.gpus,
                now=now,
                down_targets=result.down_targets,
                gpu_nodes_scraped=result.gpu_nodes_scraped,
                departed=departed,
                # what was seen ages on step-free time: a target silent across a step is not fresh for the step
                step_free_offset_s=planner_now - now,
            ),
            None,
        )
        aggregates = self._aggregates.last_aggregates if self._aggregates is not None else None
        if aggregates:  # collector.promql: deployments Prometheus summed
            await self._off_loop("observe", lambda: self.state.observe_deployments(aggregates, now=now), None)
        arrivals = await self._abandon.race("arrivals", self._read_arrivals(now, planner_now))
        named = {key: arrivals.rates.get(key, 0.0) for key in arrivals.totals}
        view = await self._abandon.race("scale", self._read_scale(now, named=named))
        no_transitions: Transitions | None = None
        no_findings: list[Finding] = []
        no_decisions: list[Decision] = []
        # the count of replicas asked for as the rollout stage reads it this tick: the rollout detector then reads a
        # scale-down mid-rollout as the stage does, as no wave
        asked = self.rollout.replicas_asked(None if view is None else view.replicas)
        self._guard("detect", partial(self.detection.set_replicas_asked, asked), None)
        transitions = await self._off_loop("detect", lambda: self.detection.tick(self.state, now=now), no_transitions)
        if transitions is not None:
            findings = list(transitions.active)
        else:  # keep reporting what was open rather than closing everything on a detector crash
            findings = self._guard("detect", self.detection.active, no_findings)
        # the gateway's rates the planner reads in place of the engines' estimate: stored with the minute's roll-ups
        gateways: Mapping[str, float] = arrivals.rates
        if view is None:
            planned = await self._off_loop(
                "decide", partial(self._decide_seen, now, planner_now, arrivals), no_decisions
            )
        else:
            # The count read is what kvpilot published: the planner's count plus what the rollout stage raised it
            # by. The planner starts from its own (scaler.own_raise), or a hold would keep the raise and the stage
            # add it again every tick; each decision then carries the count as read, which the stage and the
            # actuation go by.
            # the gateway's rate wins over the scale source's (the simulator's router) where both name a deployment
            read, rates = dict(view.replicas), {**view.arrival_rates, **arrivals.rates}
            gateways = rates
            counts = self.own_raise.planner_counts(read, planner_now)
            totals = arrivals.totals
            decisions = await self._off_loop(
                "decide",
                lambda: self._decide(
                    now, planner_now, current_replicas=counts, arrival_rates=rates or None, arrivals_totals=totals
                ),
                no_decisions,
            )
            # terminating pods of a deleted deployment may still be in FleetState: no decision for it
            planned = [
                dataclasses.replace(d, current_replicas=read[d.deployment])
                if counts.get(d.deployment) != read.get(d.deployment)
                else d
                for d in decisions
                if d.deployment not in view.gone
            ]
        rollouts = None if view is None else view.rollouts
        decisions = self._guard(
            "decide",
            lambda: self.rollout.apply(
                self.state,
                planned,
                now,
                planner=self.planner,
                deployments=rollouts,
                counted=view is not None,
                timer_now=planner_now,  # its waves' and removals' timers: on step-free time, as the planner's
            ),
            planned,
        )
        # each raised decision records the planner's count, stored with it: a new instance resumes the raise (resume)
        decisions = self._guard("decide", partial(self.own_raise.note, planned, decisions, planner_now), decisions)
        self._guard("detect", partial(self.detection.set_demand, demand_hints(decisions)), None)
        self._abandon.check("decide")  # the last point where nothing of this tick is stored yet
        self._persist(now, findings, decisions, detected=transitions is not None, gateways=gateways)
        for d in decisions:
            self._guard("publish", partial(self.board.publish, d), None)
            self.metrics.decisions.labels(d.deployment, d.reason).inc()
            self._counted.setdefault(d.deployment, set()).add(d.reason)
        # in a worker thread: at 10,000 replicas 3 ms of CPU that held the event loop (issue 17)
        snapshot = await asyncio.to_thread(self._snapshot, now, result, findings, decisions)
        self.latest = snapshot  # its /metrics gauges are rendered at its first scrape (api.exposition.OwnMetrics)
        self.tick_count += 1
        elapsed = time.perf_counter() - started
        self.metrics.tick_seconds.observe(elapsed)
        if elapsed > self.config.interval_s:
            self.metrics.overruns.inc()
        return snapshot

    def _decide(
        self,
        now: float,
        planner_now: float,
        *,
        current_replicas: Mapping[str, int] | None,
        arrival_rates: Mapping[str, float] | None = None,
        arrivals_totals: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        """The planner's decisions, decided on its step-free time (``StepFreeTime``) and stamped ``now`` (wall time,
        as everything the loop stores and publishes: KEDA's reader ages a decision on its stamp)."""
        more: dict[str, Any] = {"arrivals_totals": arrivals_totals} if arrivals_totals and self._takes_totals else {}
        decisions = self.planner.decide(
            self.state, planner_now, current_replicas=current_replicas, arrival_rates=arrival_rates, **more
        )
        if planner_now == now:
            return decisions
        return [dataclasses.replace(d, timestamp=now) for d in decisions]

    def _decide_seen(self, now: float, planner_now: float, arrivals: Arrivals) -> list[Decision]:
        """Without a scale source the planner counts the replicas the collector sees, and those carry the rollout
        stage's raise once its pods serve: where they do, the planner is told the count less the raise
        (``scaler.own_raise``), and each decision then carries the count as seen, which the stage reads as the
        replicas asked for."""
        # every replica known, the targets down since before they were read included (``known_replicas``): where
        # that is not what the planner counts itself (``replica_count``: the replicas read), it is told the count
        views = self.state.deployments()
        seen = {key: v.known_replicas for key, v in views.items()}
        counts = self.own_raise.planner_counts(seen, planner_now)
        own = {key: n for key, n in counts.items() if n != seen[key]}
        told = {key: n for key, n in counts.items() if n != replica_count(views[key])}
        decisions = self._decide(
            now,
            planner_now,
            current_replicas=told or None,
            arrival_rates=arrivals.rates or None,
            arrivals_totals=arrivals.totals,
        )
        return [
            dataclasses.replace(d, current_replicas=seen[d.deployment]) if d.deployment in own else d for d in decisions
        ]

    async def _discover(self) -> list[TargetInfo]:
        try:
            return await self.discovery.targets()
        except Exception as e:
            self._abandon.check("discover")  # it failed because the service is stopping: not a discovery failure
            self.metrics.stage_errors.labels("discover").inc()
            # a source that says why in one line (the Kubernetes API away) gets one line, not a traceback a tick
            trace = None if isinstance(e, DiscoveryUnavailable) else e
            log.error("discovery failed; scraping the previous %d targets: %s", len(self._targets), e, exc_info=trace)
            return self._targets

    async def _collect(self) -> CollectResult:
        try:
            return await self.collector.collect_once(self._targets)
        except Exception as e:
            self._abandon.check("collect")  # a PromQL source aborted (``Stopped``): the tick is abandoned, not empty
            self.metrics.stage_errors.labels("collect").inc()
            if isinstance(e, PromQLError):  # Prometheus away or answering garbage: one line naming the URL and why
                # (was 30 lines of traceback a tick); an answer the reader could not read, the first time its error
                # comes from a given line, keeps its traceback: a bug of kvpilot's own reader would read the same
                cause = e.__cause__
                first = isinstance(cause, LAYOUT_ERRORS) and self._causes.first(cause)
                log.error("collection failed; this tick has no samples: %s", e, exc_info=e if first else None)
            else:
                log.exception("collection failed; this tick has no samples")
            return CollectResult(timestamp=self.clock.now(), results=())

    async def _read_arrivals(self, now: float, planner_now: float) -> Arrivals:
        """The gateway's rates and counts (on the planner's step-free time); none when there is no gateway source or
        its read failed (counted, said in one line): that tick the planner reads the engines' estimate, and the rate
        read next spans at most twice the rate window (``kvpilot.runtime.arrivals.CounterRates``), never a stale one.
        A read that left a series out as not updated (``collector.arrivals.max_sample_age_s``) is counted too."""
        if self.arrivals is None:
            return NO_ARRIVALS
        try:
            arrivals = await self.arrivals.read(now, planner_now)
        except Exception as e:
            self._abandon.check("arrivals")  # a PromQL source aborted: the tick is abandoned, not without a gateway
            self.metrics.stage_errors.labels("arrivals").inc()
            if isinstance(e, PromQLError):
                log.error("reading the gateway's request counter failed; this tick uses the engines' estimate: %s", e)
            else:
                log.exception("reading the gateway's request counter failed; this tick uses the engines' estimate")
            return NO_ARRIVALS
        if getattr(self.arrivals, "stale", 0):  # series not updated for collector.arrivals.max_sample_age_s
            self.metrics.stage_errors.labels("arrivals").inc()
        return arrivals

    async def _read_scale(self, now: float, named: Mapping[str, float] | None = None) -> ScaleView | None:
        """Replica counts of every known deployment (zero included), and of those the gateway ``named`` (one at zero
        replicas that kvpilot has never decided is known by its requests); forgets those the source says are
        deleted."""
        if self.scale is None:
            return None
        seen = self._known | set(self.state.deployments())
        fresh = set(named or ()) - seen
        if len(fresh) > GATEWAY_ONLY_ASKED:  # a mapping that names what are no Deployments (a path, a user label)
            rates = named or {}
            fresh = set(sorted(fresh, key=lambda k: (-rates.get(k, 0.0), k))[:GATEWAY_ONLY_ASKED])
            if not self._said_named:
                self._said_named = True
                log.warning(
                    "collector.arrivals names %d deployments kvpilot does not know; the %d busiest are asked of the "
                    "scale source each tick (do its labels name Deployments? collector.arrivals.deployment_label)",
                    len(set(named or ()) - seen),
                    GATEWAY_ONLY_ASKED,
                )
        asked = seen | fresh
        if self.owns is not None:
            asked = {k for k in asked if self.owns(k)}
        try:
            view = await self.scale.read(sorted(asked), now)
        except Exception:
            self.metrics.stage_errors.labels("scale").inc()
            log.exception("reading replica counts failed; deciding from what the collector sees")
            return None
        for key in view.gone:
            self._forget(key)
        # a deployment only the gateway names stays known once the source counts it: a label that maps to no
        # Deployment is asked about while the gateway names it, not for ever
        self._known = ((asked & seen) | set(view.replicas)) - view.gone
        return view

    def _release_unowned(self, owns: Callable[[str], bool]) -> None:
        """Deployments whose shard moved to another instance: decision off the board (KEDA calls are forwarded to
        the new owner), planner state dropped, no longer asked of the scale source."""
        for key in [k for k in self._known | set(self.writes.stored) | set(self._counted) if not owns(k)]:
            self._known.discard(key)
            self.writes.stored.pop(key, None)
            self.own_raise.forget(key)
            self._guard("publish", partial(self.board.forget, key), None)
            self._guard("decide", partial(self.planner.forget, key), None)
            self._uncount(key)

    def _uncount(self, key: str) -> None:
        """``kvpilot_decisions_total`` of a deployment this instance no longer decides (its shard moved, or it was
        deleted) leaves /metrics: the new owner counts its decisions from there. Kept, an instance that held every
        shard while the others started rendered the whole fleet's decision counters at every scrape, frozen, and two
        instances exported one deployment's counter (issue 17)."""
        for reason in self._counted.pop(key, ()):
            self.metrics.decisions.remove(key, reason)

    def _forget(self, key: str) -> None:
        if key in self._known or key in self.writes.stored:
            log.info("deployment %s was deleted: its decision is withdrawn and its planner state dropped", key)
        self.writes.stored.pop(key, None)
        self.rollout.forget(key)
        self.own_raise.forget(key)
        self._guard("publish", partial(self.board.forget, key), None)
        self._guard("decide", partial(self.planner.forget, key), None)
        self._uncount(key)

    def _persist(
        self,
        now: float,
        findings: list[Finding],
        decisions: list[Decision],
        *,
        detected: bool,
        gateways: Mapping[str, float] | None = None,
    ) -> None:
        """Queue this tick's writes (``kvpilot.runtime.persist``); the writer task applies them. ``gateways``: the
        rates the planner read from a gateway (``collector.arrivals``, the scale source's router), stored as the
        minute's ``planner_arrival_rate`` where the engines' estimate would be: for the deployments the collector
        sees and those decided on the gateway alone (at zero replicas); a name that is neither is not stored."""
        planner = self.planner
        capacity = planner.capacity if isinstance(planner, Remembers) else None
        deployments = self.state.deployments()
        decided = {d.deployment for d in decisions}
        read = {k: r for k, r in (gateways or {}).items() if k in deployments or k in decided}
        if detected and self.writes_findings is not None and not self.writes_findings():
            detected = False  # a follower: two writers closed what the other's list lacked, and the other reopened it
        closes = None if self.owns is None or not detected else self._closes(self.owns)  # read on this thread
        me = self.reporter
        reporter = None if closes is None or me is None else Reporter(me, self.state.stale_after_s)
        self.writes.persist(
            now,
            deployments,
            findings,
            decisions,
            detected=detected,
            capacity=capacity,
            closes=closes,
            reporter=reporter,
            gateways=read,
        )

    def _closes(self, owns: Callable[[str], bool]) -> Callable[[str, str, str, str, float], bool]:
        """Sharding: the live findings this instance may close, by (deployment, replica, node, gpu) and how long ago
        any instance last reported them (``store.repo.findings.Closes``). Each is one instance's:

        - a deployment's: its shard's holder, which alone reads it;
        - a node's (its GPUs, its GPU exporter down): several instances may read a node (every one with a replica
          there keeps its GPU page for the join, and a page listed with no node is kept by its URL's shard, whatever
          node its GPUs name), and they see different things (only the replica's owner sees a GPU hang), so each
          reports what it sees and one closes: the holder of the shard ``node/<node>``, once no instance has reported
          it for ``stale_after_s``. That holder exists whether or not anyone still reads the node: a node drained and
          deleted has its findings closed too. Before, every instance that listed the node (its GPUs, or only its
          replicas there) closed what it did not see: one that kept no page of the node closed the keeper's findings
          each tick (a new episode, the acknowledgement lost), and a node nobody listed any more stayed open forever;
        - a GPU whose node is unknown (dcgm-exporter without ``NODE_NAME``): the instance that reads it (the one
          keeper of its page, by its URL's shard), at once; once nobody reads it, the holder of the empty name's shard
          after the same ``stale_after_s``;
        - a GPU page on no node that is down names the page (its URL as the replica, ``detectors.target_down``): the
          holder of the URL's shard, its keeper (``shards.owned_targets``);
        - no subject at all (a row from before 3658988): the holder of the empty name's shard."""
        # a finding's gpu: the GPU's UUID (or index), a MIG instance's <UUID>/mig<instance> (detectors.stuck_gpu)
        nodeless = {
            name
            for g in self.state.gpus()
            if not g.sample.node
            for name in (gpu_subject(g.sample), physical_subject(g.sample))
        }
        quiet_after_s = self.state.stale_after_s

        def closes(deployment: str, replica: str, node: str, gpu: str, quiet_s: float) -> bool:
            if deployment:
                return owns(deployment)
            if node:
                return quiet_s >= quiet_after_s and owns(f"node/{node}")
            if gpu:
                return gpu in nodeless or (quiet_s >= quiet_after_s and owns(""))
            return owns(f"node/{replica}") if replica else owns("")

        return closes

    def _snapshot(
        self, now: float, result: CollectResult, findings: list[Finding], decisions: list[Decision]
    ) -> Snapshot:
        tte: dict[tuple[str, str], float] = {}
        for r in self.state.replicas():
            unknown: float | None = None
            # The window the projection reads (its trend's), not the hour kept.
            history = self.state.replica_history_since(r.key, r.last_seen - self.config.kv.trend_window_s)
            project = partial(time_to_exhaustion_s, history, self.config.kv, trends=self.detection.kv_trends)
            seconds = self._guard("kv_projection", project, unknown)
            if seconds is None and r.sample.kv_usage is not None:
                # Known usage that is not filling: "never at the current trend". Exported as +Inf so that the
                # series exists (absence would read as "unknown") and `< threshold` alerts stay silent.
                seconds = math.inf
            if seconds is not None:
                tte[(r.sample.deployment_key, r.sample.replica)] = seconds
        # The newest decision of every deployment still in the fleet (a restart's resumed ones until re-decided),
        # those at zero replicas included.
        live = set(self.state.deployments()) | self._known
        latest = {k: d for k, d in self.writes.stored.items() if k in live or not live}
        latest.update({d.deployment: d for d in decisions})
        deployments = self.state.deployments()
        cost = self.cost
        no_costs: dict[str, DeploymentCost] = {}
        costs = no_costs
        if cost is not None:
            asked = partial(discovered_gpus, self._targets, cost.gpus)  # what the pods ask the scheduler for
            costs = self._guard("cost", lambda: fleet_costs(deployments, cost, asked()), no_costs)
        return Snapshot(
            tick=self.tick_count + 1,
            t=now,
            deployments=deployments,
            replicas=self.state.replicas(),
            gpus=self.state.gpus(),
            decisions=latest,
            findings=tuple(findings),
            targets=tuple(self._targets),
            target_health=dict(result.health),
            node_drains=self._guard("drains", self.node_drains, {}),
            kv_time_to_exhaustion=tte,
            costs=costs,
        )
