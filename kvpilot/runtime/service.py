"""The long-running service: the control loop, the store writer and (with HA) the Lease, as named, guarded
asyncio tasks around one ``ControlLoop``; and the ``Runtime`` the API reads.

Actuation never runs inside the loop's task: after each tick the loop wakes the ``actuator`` task (drain requests,
direct scaling, the node → drain-state map) and that wakes the ``drain-worker`` task (approved drains, one at a
time, in a thread); the loop awaits neither, so a drain whose PodDisruptionBudget keeps refusing, or a store call
that hangs, never delays a tick.

Shutdown: SIGTERM sets one stop flag. The tick in progress is abandoned at once, whatever stage it is in, unless
it has already queued its writes (``kvpilot.runtime.stopping``: nothing of an abandoned tick is stored, and a PromQL
source drops its queries and its reader), a running drain is interrupted (its action goes back to approved for the
next leader), then the store writer flushes what earlier ticks queued, then the tasks end. After SIGKILL, a
restart restores open findings (so hysteresis does not flap them), the last decision of every deployment
(published at once, so KEDA keeps its target) and the forecaster's history from the per-minute roll-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

from prometheus_client.registry import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.exposition import LoopCounters, OwnMetrics
from api.runtime import RuntimeHealth, TargetRegistry
from collector.clock import Clock
from collector.discovery import Discovery
from collector.scrape import Sleep, sleep_unless_stopped, spawn_guarded
from kvpilot.actuation import Actuation
from kvpilot.runtime.loop import ControlLoop, Detect, LoopConfig, Publish
from kvpilot.runtime.node_drains import NodeDrains
from kvpilot.runtime.restore import Restored, publishable, warm_start
from kvpilot.runtime.snapshot import Snapshot
from kvpilot.runtime.stopping import Abortable, TickAbandoned, in_daemon_thread
from scaler.publish import DecisionSource
from store import repo
from store.buffer import BufferedWriter
from store.db import ping, transaction
from store.drain_states import ACTIVE
from store.errors import SaidOnce, driver_words

LIVE_DRAINS = frozenset(a.value for a in ACTIVE)

log = logging.getLogger(__name__)


# Full collections at most once per this many generation-1 collections (CPython's default: 10). Its other rule (a
# full collection only once the objects promoted since the last one reach 25 % of those it traced then) spaced
# them while the startup heap was traced; with that heap frozen, they came every ~4 s at 10,000 replicas, each
# tracing the tick's transient objects (~35 ms of CPU on the benchmark VM).
FULL_COLLECTION_AFTER = 100


def freeze_startup_heap() -> bool:
    """Once per process: collect, then move every object alive now (the imported modules, the app, the wiring,
    the first tick's state: ~190,000 objects in ``kvpilot run``) to the collector's permanent generation, where
    no later collection traces them. Returns whether it froze (False: the heap was already frozen).

    Why (issue 17): a full (generation-2) collection stops every thread, the event loop included, for as long as
    it takes to trace the whole heap: ~0.15 s of CPU for the import-time heap alone on the benchmark VM, six to
    eleven times a minute at 10,000 replicas; those pauses, not the stages in the worker thread, were the API's
    p99 (bench/fleet_scale.py, BENCHMARKS.md). Frozen objects freed by reference counting are still freed; only
    a reference cycle among them would never be collected, and the ``collect()`` before the freeze leaves none.
    Full collections are then spaced by ``FULL_COLLECTION_AFTER``."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, max(full, FULL_COLLECTION_AFTER))
    return True


# How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms). The event loop gives the
# GIL up at every system call (select, recv, send) and then waits up to this long to get it back from a stage or
# a decode running in a worker thread, several times per request: at 5 ms a round trip on the loop against one
# busy thread took 35-60 ms at its p99, at 1 ms 5-10 ms (issue 17, BENCHMARKS.md "Fleet scale").
GIL_SWITCH_S = 0.001
# A replica that campaigns for a Lease (ha.enabled, sharding) with SQLite keeps a store of its own: only the holder
# writes findings and proposes drains, in its own file. Fine for one replica (deploy/base's default), so the start
# says it at INFO; a replica that has followed another holder for SPLIT_AFTER_LEASES lease periods proves a second
# one and warns once (a rolling update's new pod follows the old holder for a few seconds, never that long). Every
# follower's /v1/findings and /v1/drains say it too (503), so that an approval is never left where the holder does
# not read it. Only a Lease read naming another holder proves a second replica (``SeesLease``): a lone replica that
# cannot take the Lease (the API server away, no RBAC on leases) warns that it could not hold it, and why.
SPLIT_AFTER_LEASES = 4
OWN_STORE_NOTE = (
    "the store is SQLite (no KVPILOT_DATABASE_URL) and this replica campaigns for a Lease (ha.enabled or sharding): "
    "run one replica; two or more would each keep their own store (docs/scaling-large-fleets.md, Lease-based HA)"
)
OWN_STORE_WARNING = (
    "another replica (%s) has held the Lease for %.0f s while this one's store is its own SQLite (no "
    "KVPILOT_DATABASE_URL): only the holder's store has the findings and drains, and /v1/findings and /v1/drains "
    "answer 503 here. Give every replica one PostgreSQL (KVPILOT_DATABASE_URL), or run one replica "
    "(docs/scaling-large-fleets.md, Lease-based HA)"
)
NOT_HELD_WARNING = (
    "this replica could not hold the Lease for %.0f s (%s) and its store is its own SQLite (no KVPILOT_DATABASE_URL): "
    "it writes no findings, requests no drains, and /v1/findings and /v1/drains answer 503 here. No other holder was "
    "read: check that the API server is reachable and that kvpilot's Role may get, create and update "
    "coordination.k8s.io leases (docs/scaling-large-fleets.md, Lease-based HA)"
)
NOT_HOLDERS_STORE = (
    "this replica does not hold the Lease and its store is its own SQLite: the holder's findings and drains are not "
    "here, and a change made here would never reach it. Retry (the Service may pick the holder); fix: one PostgreSQL "
    "for every replica (KVPILOT_DATABASE_URL), or one replica"
)


def shorten_gil_switch(seconds: float = GIL_SWITCH_S) -> float:
    """Set the interpreter's switch interval (process-wide) to at most ``seconds``; returns the one before. The
    cost is more hand-overs of the GIL, and only while threads contend for it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, seconds))
    return before


class Leadership(Protocol):
    """Who may actuate: ``kvpilot.runtime.lease.LeaseElector`` with HA, ``AlwaysLeader`` without."""

    leader: bool


@runtime_checkable
class Campaigns(Protocol):
    """Leadership that must be kept up (``LeaseElector``, ``ShardCoordinator``): the service runs it as its lease
    task. ``AlwaysLeader`` has nothing to run."""

    async def run(self, stop: asyncio.Event, *, every_s: float, sleep: Sleep = asyncio.sleep) -> None: ...


@runtime_checkable
class SeesLease(Protocol):
    """Leadership that says what its last round read of the Lease (``LeaseElector``; with sharding
    ``ShardCoordinator``, of its group's shard Leases): ``holder_seen``, another replica's identity holding it
    unexpired (None: the round read no such holder); ``lease_failure``, why the round could not read or write it (an
    HTTP status, the API server unreachable; None: it answered)."""

    holder_seen: str | None
    lease_failure: str | None


@runtime_checkable
class HasOwnMetrics(Protocol):
    """A collect stage with gauges of its own for /metrics (``collector.discovery.promql.PromQLSource``)."""

    def register_metrics(self, registry: CollectorRegistry) -> None: ...


class AlwaysLeader:
    leader = True


@dataclass(frozen=True)
class SchemaAgain:
    """With ``store.auto_migrate``: how a running kvpilot finds its store answering without kvpilot's schema
    (``missing``, blocking) and creates it again (``create``, blocking: the revision it created, None where another
    kvpilot did first), once it has been missing for ``after_s`` (``store.recreate_after_s``)."""

    missing: Callable[[], bool]
    create: Callable[[], str | None]
    after_s: float = 60.0


class Service:
    def __init__(
        self,
        *,
        clock: Clock,
        loop: ControlLoop,
        engine: Engine,
        sessions: sessionmaker[Session],
        writer: BufferedWriter,
        counters: LoopCounters,
        node_drains: NodeDrains,
        targets: TargetRegistry,
        interval_s: float,
        max_body_bytes: int = 64 * 1024,
        drain_dry_run: bool = True,
        drain_max_concurrent: int = 1,
        drain_budget: int | None = None,
        drain_budget_window_s: float = 86400.0,
        leadership: Leadership | None = None,
        actuation: Actuation | None = None,
        renew_every_s: float = 5.0,
        sleep: Sleep = asyncio.sleep,
        store_hang_s: float = 10.0,
        store_probe_every_s: float = 2.0,
        freeze_heap: bool = True,
        gil_switch_s: float | None = GIL_SWITCH_S,
        split_after_s: float = SPLIT_AFTER_LEASES * 15.0,
        schema_again: SchemaAgain | None = None,
        decisions: DecisionSource,
    ) -> None:
        """``counters``: those ``loop`` increments; the service adds the snapshot's gauges and its health to their
        registry (``metrics``, what /metrics renders). ``node_drains``: the map the actuator task refreshes and
        ``loop`` reads for its snapshots. ``freeze_heap``: after the first tick, ``freeze_startup_heap()``
        (once per process). ``gil_switch_s``: at start, ``shorten_gil_switch(gil_switch_s)`` (None: the
        interpreter's default). ``split_after_s``: how long a replica on its own SQLite follows another holder
        before it warns (``SPLIT_AFTER_LEASES`` of ``ha.lease_duration_s``). ``schema_again``: with
        ``store.auto_migrate``, how the store probe, while writes fail, finds the database answering without
        kvpilot's schema and, once that has lasted ``SchemaAgain.after_s``, creates it again."""
        self.clock = clock
        self.loop = loop
        # what KEDA reads (``kvpilot.runtime.runner.keda_reader``): the loop's board, or with sharding the board with
        # the stored decisions of a shard just taken (``kvpilot.runtime.taken_answers``)
        self.decisions = decisions
        self.engine = engine
        self._sessions = sessions
        self.writer = writer
        self.counters = counters
        self.metrics = OwnMetrics(counters, self.snapshot, self.health)
        self._targets = targets
        self.interval_s = interval_s
        self.settings_max_body_bytes = max_body_bytes
        self.drain_dry_run = drain_dry_run
        self.drain_max_concurrent = drain_max_concurrent
        self.drain_budget = drain_budget
        self.drain_budget_window_s = drain_budget_window_s
        self.leadership: Leadership = leadership or AlwaysLeader()
        self.store_sqlite = engine.dialect.name == "sqlite"
        self.own_store = self.store_sqlite and leadership is not None
        self.split_after_s = split_after_s
        self._following_since: float | None = None  # the first tick of this run of ticks without the Lease
        self._split_said: set[str] = set()  # the warnings said (each once: another holder read, the Lease not held)
        if self.own_store:
            log.info(OWN_STORE_NOTE)
        self.actuation = actuation
        self.renew_every_s = renew_every_s
        self._sleep = sleep
        self.stop = asyncio.Event()
        self._wake_writer = asyncio.Event()
        self._wake_actuator = asyncio.Event()
        self.actuator_passes_started = 0  # passes begin after the wake is cleared: one begun after a tick saw it
        self.actuator_passes_done = 0
        self._wake_drains = asyncio.Event()
        self.node_drains = node_drains
        self.store_hang_s = store_hang_s
        if isinstance(loop.collector, HasOwnMetrics):  # a PromQL source's own gauges on /metrics
            loop.collector.register_metrics(self.metrics.registry)
        self._probe_every_s = store_probe_every_s
        self._probe_started: float | None = None  # time.monotonic() of the probe in flight
        self._probe_ok = True
        self.schema_again = schema_again
        self._schema_missing_since: float | None = None  # time.monotonic() the probe first found no schema
        self._drain_store = SaidOnce(log, "drain worker")
        self.freeze_heap = freeze_heap
        self.gil_switch_s = gil_switch_s
        self.tasks: list[asyncio.Task[None]] = []
        self.keda_serving: Callable[[], bool] | None = None  # set by `kvpilot run` when KEDA has its own process

    # -- Runtime (what the API reads) ---------------------------------------------------------------------------

    @property
    def sessions(self) -> sessionmaker[Session]:
        return self._sessions

    @property
    def targets(self) -> TargetRegistry:
        return self._targets

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def snapshot(self) -> Snapshot | None:
        return self.loop.latest

    async def exposition(self) -> bytes:
        return await self.metrics.page()

    def now(self) -> float:
        return self.clock.now()

    def store_problem(self) -> str | None:
        """Why the store is not usable now, in words that name no host or port (``/readyz`` is unauthenticated;
        the detail is in the log), or None."""
        w = self.writer
        probing = 0.0 if self._probe_started is None else time.monotonic() - self._probe_started
        hung = max(w.in_flight_s(), probing)
        if hung > self.store_hang_s:
            return f"the store has not answered for {hung:.0f} s"
        if not self._probe_ok:
            return "the store does not answer"
        if not w.up:
            return "writes to the store are failing; they are buffered"
        return None

    def health(self) -> RuntimeHealth:
        w = self.writer
        snap = self.loop.latest
        problem = self.store_problem()
        return RuntimeHealth(
            first_tick_done=snap is not None,
            store_up=problem is None,
            store_pending_writes=w.pending,
            store_dropped_writes=w.lost_total,
            store_last_error=problem,
            last_tick_at=snap.t if snap else None,
            leader=self.leadership.leader,
            keda_serving=self.keda_serving() if self.keda_serving is not None else None,
            store_sqlite=self.store_sqlite,
            store_not_holders=NOT_HOLDERS_STORE if self.own_store and not self.leadership.leader else None,
        )

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self, restored: Restored) -> None:
        """Resume from what a previous run left (see ``restore``) and start the tasks."""
        if self.gil_switch_s is not None:
            shorten_gil_switch(self.gil_switch_s)
        # The restored decisions first, before anything here awaits: `kvpilot run` already serves KEDA.
        decisions = publishable(restored.decisions)
        skipped = len(restored.decisions) - len(decisions)
        if skipped:
            self.counters.stage_errors.labels("restore").inc(skipped)
        self.loop.resume(decisions)
        first = in_daemon_thread(partial(ping, self.engine), name="store-call")
        done, _ = await asyncio.wait({first}, timeout=self.store_hang_s)
        self.writer.up = bool(done) and first.result()
        # The forecasters' restored day, scored since 45bcc72 (~0.15 s of CPU per deployment): in a thread of its own,
        # so that the event loop serves /healthz, /readyz (503 until the first tick) and KEDA meanwhile (`kvpilot
        # run` serves them before this is awaited); nothing else touches the planner until the tasks below start.
        # A stop arriving meanwhile does not wait for it.
        warming = in_daemon_thread(partial(warm_start, self.loop.planner, restored.rollups), name="warm-start")
        stopping = asyncio.ensure_future(self.stop.wait())
        either: set[asyncio.Future[Any]] = {warming, stopping}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if warming.done():
            fed = warming.result()
            log.info(
                "restored %d open findings, %d decisions, %d roll-up points for the forecasters",
                len(restored.findings),
                len(restored.decisions),
                fed,
            )
        else:
            warming.cancel()  # abandoned: the thread runs to its end, and nothing reads what it fed
            log.info("stopping during warm start: the forecasters' history was not all restored")
        self.tasks = [
            spawn_guarded("control-loop", self._run_loop, self.stop, sleep=self._sleep),
            spawn_guarded("store-writer", self._run_writer, self.stop, sleep=self._sleep),
            spawn_guarded("actuator", self._run_actuator, self.stop, sleep=self._sleep),
            spawn_guarded("drain-worker", self._run_drain_worker, self.stop, sleep=self._sleep),
            spawn_guarded("store-probe", self._run_store_probe, self.stop, sleep=self._sleep),
        ]
        if isinstance(self.leadership, Campaigns):
            campaign = partial(self.leadership.run, self.stop, every_s=self.renew_every_s, sleep=self._sleep)
            self.tasks.append(spawn_guarded("lease", campaign, self.stop, sleep=self._sleep))

    async def wait(self) -> None:
        """Until stop: then the tick in progress is abandoned (unless its writes are already queued) and pending
        writes are flushed."""
        await self.stop.wait()
        self.loop.abandon()
        for wake in (self._wake_writer, self._wake_actuator, self._wake_drains):
            wake.set()
        # A task waiting on a store that hangs (the tick never waits on the store, and is abandoned at once) would
        # hold shutdown for as long: bounded, then cancelled.
        bound_s = self.store_hang_s + self.interval_s
        _, stuck = await asyncio.wait(self.tasks, timeout=bound_s)
        for task in stuck:
            why = "its tick did not stop" if task.get_name() == "control-loop" else "waiting on a store that hangs"
            log.error(
                "task %s had not ended %.0f s after shutdown began (%s); abandoned", task.get_name(), bound_s, why
            )
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        flushed = in_daemon_thread(self.writer.flush, name="store-call")
        done, _ = await asyncio.wait({flushed}, timeout=self.store_hang_s)
        if not done or not flushed.result():
            log.error("shutting down with %d writes the store did not take", self.writer.pending)

    async def _run_loop(self) -> None:
        while not self.stop.is_set():
            began = self.clock.monotonic()  # the tick's length: a step of the wall clock must not stretch the sleep
            try:
                await self.loop.tick()
            except TickAbandoned as e:
                log.info("stopping: %s; nothing of that tick is stored (what earlier ticks decided is)", e)
                return
            if self.freeze_heap:
                self.freeze_heap = False
                if freeze_startup_heap():
                    frozen = gc.get_freeze_count()
                    log.info("heap frozen after the first tick: %d objects no collection will trace", frozen)
            if self.own_store:
                self._note_split(began)
            self._wake_writer.set()
            self._wake_actuator.set()  # never awaited: a slow drain or store cannot hold the next tick
            await sleep_unless_stopped(
                self._sleep, max(0.0, self.interval_s - (self.clock.monotonic() - began)), self.stop
            )

    def _note_split(self, now: float) -> None:
        """Warn once when this replica, on its own SQLite, has ticked without the Lease for ``split_after_s`` (``now``
        on the monotonic clock: a step of the wall clock neither hastens nor delays it by the step): that another
        replica holds it when the Lease's last read named one, else that it could not hold it (and why)."""
        if self.leadership.leader:
            self._following_since = None
            return
        if self._following_since is None:
            self._following_since = now
            return
        following = now - self._following_since
        if following < self.split_after_s:
            return
        seen = self.leadership if isinstance(self.leadership, SeesLease) else None
        holder = seen.holder_seen if seen is not None else None
        said = "split" if holder else "not held"
        if said in self._split_said:
            return
        self._split_said.add(said)
        if holder:
            log.warning(OWN_STORE_WARNING, holder, following)
        else:
            why = seen.lease_failure if seen is not None else None
            log.warning(NOT_HELD_WARNING, following, why or "the last read of the Lease named no other holder")

    async def _run_writer(self) -> None:
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            await asyncio.to_thread(self.writer.flush)
            if self.stop.is_set():
                return

    async def _run_store_probe(self) -> None:
        """Ask the store a trivial query every ``store_probe_every_s`` (real time; ``store.probe_every_s``), one at
        a time, in a daemon thread: ``/readyz`` and ``kvpilot_store_up`` read its latest answer (``store_problem``),
        a store that hangs (a stopped server answers nothing, not even an error) shows there while the probe is
        outstanding, and a hung probe never keeps the process from exiting."""
        while not self.stop.is_set():
            self._probe_started = time.monotonic()
            probe: asyncio.Future[Any] = in_daemon_thread(self._probe, name="store-call")
            stopper: asyncio.Future[Any] = asyncio.ensure_future(self.stop.wait())
            try:
                await asyncio.wait([probe, stopper], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            if not probe.done():
                return
            self._probe_started = None
            self._probe_ok = bool(probe.result())
            self.writer.up = self.writer.up or (self._probe_ok and self.writer.pending == 0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self._probe_every_s)

    def _probe(self) -> bool:
        """The store probe's call (its own thread): whether the database answers a trivial query; where it does
        while writes fail and has no kvpilot schema for ``schema_again.after_s``, the schema created again. A
        database that answers without kvpilot's tables (one recreated empty, a SQLite file removed under a running
        kvpilot) failed every write and read until a restart, which migrates: /readyz 503 for good (liveness still
        200, so nothing restarted it), the buffer filling, then dropping its oldest writes. The wait keeps what an
        operator brings back meanwhile (a dump being restored, a SQLite file moved aside and back): a schema created
        under it would take the writes the restored data then replaces, or fail the restore on every table."""
        ok = ping(self.engine)
        again = self.schema_again
        if again is None or not ok or self.writer.up:
            if ok and self.writer.up:
                self._schema_back()
            elif not ok:  # away altogether: the wait starts again from its return, not from before the outage
                self._schema_missing_since = None
            return ok
        try:
            if not again.missing():
                self._schema_back()
                return ok
            now = time.monotonic()
            if self._schema_missing_since is None:
                self._schema_missing_since = now
                if again.after_s > 0:
                    log.warning(
                        "the store answers but holds no kvpilot schema (a database recreated empty or being restored, "
                        "a SQLite file removed or moved aside): writes are held, and it is created again in %.0f s "
                        "unless it comes back (store.recreate_after_s)",
                        again.after_s,
                    )
            if now - self._schema_missing_since < again.after_s:
                return ok
            created = again.create()
        except Exception as e:  # the next probe tries again; a refusal (a newer kvpilot's revision) is its own
            log.debug("store schema check failed: %s", driver_words(e))
            return ok
        self._schema_missing_since = None
        if created is not None:
            log.warning(
                "the store answered without kvpilot's schema for store.recreate_after_s (a database recreated "
                "empty, a SQLite file removed): created it again at %s (store.auto_migrate), as a restart would; "
                "what it held before is not in it; %d buffered writes follow",
                created,
                self.writer.pending,
            )
        return ok

    def _schema_back(self) -> None:
        """The store holds kvpilot's schema again (or its writes get through): said once where its absence was."""
        if self._schema_missing_since is not None:
            pending = self.writer.pending
            log.warning(
                "the store holds kvpilot's schema again; %s",
                f"{pending} held writes follow" if pending else "the held writes went into it",
            )
        self._schema_missing_since = None

    async def _run_actuator(self) -> None:
        """After each tick (woken by the loop, at most one pass in flight): the drain-state map, then the leader's
        drain requests and scaling, then a wake-up for the drain worker."""
        while True:
            await self._wake_actuator.wait()
            self._wake_actuator.clear()
            if self.stop.is_set():
                return
            self.actuator_passes_started += 1
            await self._refresh_drains()
            await self._refresh_targets()
            snapshot = self.loop.latest
            if self.actuation is not None and self.leadership.leader and snapshot is not None:
                try:
                    await self.actuation.after_tick(snapshot)
                except Exception:
                    self.counters.stage_errors.labels("actuate").inc()
                    log.exception("actuation stage failed; retrying next tick")
            elif self.actuation is not None and not self.leadership.leader:
                self.actuation.not_leading()
            self.actuator_passes_done += 1
            self._wake_drains.set()

    async def _run_drain_worker(self) -> None:
        """Approved drains, one at a time; a cancel (API) or the stop flag (SIGTERM) interrupts the one running."""
        while True:
            await self._wake_drains.wait()
            self._wake_drains.clear()
            if self.stop.is_set():
                return
            if self.actuation is None or not self.leadership.leader:
                continue
            try:
                await self.actuation.execute_approved(self.stop, leading=lambda: self.leadership.leader)
            except SQLAlchemyError as e:
                self._drain_store.failed(e)
            except Exception:
                self.counters.stage_errors.labels("drain").inc()
                log.exception("drain worker failed; retrying next tick")
            else:
                self._drain_store.answered()

    async def _refresh_targets(self) -> None:
        """The targets other kvpilots on the store added or removed through the API; kept as they are while the store
        is away."""
        if not self.writer.up:
            return
        with contextlib.suppress(SQLAlchemyError):
            await asyncio.to_thread(self._targets.refresh)

    async def _refresh_drains(self) -> None:
        """Node → state of live drain actions (kvpilot_node_drain_state); kept as is while the store is away. A
        read-only unit: beside another kvpilot's write it reads the last committed map, not waiting behind it."""

        def read() -> dict[str, str]:
            with transaction(self._sessions, reads_only=True) as s:  # one live action per node (a unique index)
                return {r.node: r.state for r in repo.drains_in(session=s, states=LIVE_DRAINS, limit=1000)}

        if not self.writer.up:
            return
        with contextlib.suppress(SQLAlchemyError):
            self.node_drains.replace(await asyncio.to_thread(read))


__all__ = ["Abortable", "Detect", "Discovery", "LoopConfig", "Publish", "Service"]
