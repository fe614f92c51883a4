"""Actuation: the only code that changes the world outside kvpilot — direct scaling (``scale``), node drains
(``drain``) and their audit records (``audit``) — and what only the leader does with it after a tick: request
drains for flagged nodes (through the safety rails), execute approved drains, and apply scaling decisions in
``direct`` mode.

Two parts, each run by its own guarded task in ``kvpilot.runtime.service`` and never awaited by the control loop:
``after_tick`` (requests and scaling, once per tick) and ``execute_approved`` (the drain worker: one approved
drain at a time in a worker thread, polled for an operator's cancel and for the stop flag, either of which
interrupts its backoff at once). Everything here is audited in the store. A replica that is not the Lease holder
skips both, so several kvpilot replicas can serve reads while exactly one acts on the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import Clock
from detectors.drain_rails import DrainDecision, DrainRails, decide
from kvpilot.actuation import recheck
from kvpilot.actuation.audit import AuditRecord, Outcome
from kvpilot.actuation.drain import DrainResult
from kvpilot.actuation.heartbeats import Heartbeats
from kvpilot.actuation.scale import ActuationError, ActuationResult, Actuator
from kvpilot.runtime.snapshot import Snapshot
from scaler.decision import Decision
from scaler.publish import scale_target
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from store.errors import InvalidTransition, RailFull, SaidOnce
from store.fields import fit
from store.models import DrainActionRow

log = logging.getLogger(__name__)

ACTOR = "kvpilot"
# A claim's audit message with sharding names the instance that claimed it: another instance leaves a drain claimed
# by a live one to it (``Actuation._requeue_orphans``).
CLAIMED_BY = "executing on "
RESUMED = "found executing with no worker running it (its leader stopped or lost the Lease); resumed"
# A drain the API server asks to wait (DrainResult.busy) is tried again after this, doubling per try up to BUSY_MAX_S,
# and never before the Retry-After it asked for: kubectl drain retries a refused eviction every 5 s; the cap keeps a
# drain freed after a long refusal starting within minutes, at about 12 tries an hour while it lasts.
BUSY_FIRST_S = 5.0
BUSY_MAX_S = 300.0
# The wait is kept in the drain's row too (its evidence, a JSON column: no schema change), so that a restart or the
# next Lease holder does not try it again at once: the time before which it is not tried, and how many tries it had.
# Cleared when the drain is claimed (executing) or held back (requested): only an approved drain waiting has them.
BUSY_NOT_BEFORE = "busy_not_before"
BUSY_TRIES = "busy_tries"
# The wait asked, kept beside its end: a stored end is never honoured past now + this wait (an end written on another
# holder's clock running ahead, or before the wall clock stepped back, would otherwise block the drain for the skew).
BUSY_WAIT_S = "busy_wait_s"


@dataclass(slots=True)
class _Busy:
    """A drain the API server asked to wait: when to try again, how many tries, and the steps of the last one."""

    not_before: float  # on the clock's monotonic reading: a step of the wall clock neither holds nor frees it
    tries: int
    steps: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True, slots=True)
class FleetShare:
    """With sharding, the circuit breaker counts the fleet's nodes, not this instance's alone: each instance stores the
    node set of its snapshot under its ``identity`` (``store.repo.refresh_instance_nodes``, again at least every
    ``refresh_every_s`` of its monotonic clock, when it also reads the others' stamps to watch them change), and reads
    the sets of the instances live (``Heartbeats``: a refresh watched within ``stale_after_s`` of this instance's
    monotonic clock; a row read for the first time placed by its stamp; rows of an instance gone or holding no shard
    are ignored, and deleted once this instance watched them unchanged that long) and the nodes every instance's
    findings flag (``findings``). An instance whose refresh this one
    watched unchanged for ``stale_after_s`` is gone: a drain it claimed is resumed (``Actuation._requeue_orphans``)."""

    identity: str
    stale_after_s: float
    refresh_every_s: float


class Drainer(Protocol):
    """``kvpilot.actuation.drain.NodeDrainer``."""

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_step: Callable[[AuditRecord], None] | None = None,
    ) -> DrainResult:
        """``should_stop`` is asked before each eviction (``NodeDrainer.drain``): True ends the drain, cancelled.
        ``on_step`` is told each step's record as it is made."""
        ...

    def cordoned(self) -> set[str] | None:
        """Nodes kvpilot cordoned that are still cordoned (None: unknown now)."""
        ...


class NoClusterDrainer:
    """For fleets without a Kubernetes API (the simulator, static targets, a PromQL source without HA): a dry run
    says what a drain would do and that it was not checked against a cluster; a real drain fails, saying why and what
    to set, rather than pretending. ``why``: the words of the rule that gave the fleet no cluster, as the caller
    that applies it says it (``kvpilot.runtime.wiring.drains_on_cluster``), named in both."""

    def __init__(self, clock: Clock, *, why: str = "no Kubernetes API is configured") -> None:
        self._clock = clock
        self.why = why

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_step: Callable[[AuditRecord], None] | None = None,
    ) -> DrainResult:
        now = self._clock.now()
        if dry_run:
            words = f"would cordon, taint and evict; not checked against a cluster, and a real drain fails: {self.why}"
            record = AuditRecord(now, node, "cordon", node, Outcome.DRY_RUN, words, True)
            return DrainResult(node, True, [record])
        record = AuditRecord(now, node, "cordon", node, Outcome.ERROR, f"no Kubernetes API: {self.why}", False)
        return DrainResult(node, False, [record], failed=True)

    def cordoned(self) -> set[str] | None:
        return set()  # no cluster, nothing cordoned


class RefusalLog:
    """The rails refuse the same drain every tick while its cause lasts (a node holding a deployment's last ready
    replica is refused for as long as it does): logged once per node and rail when it starts or the rail changes,
    once when it ends, with how often and how long; every refusal is counted (``kvpilot_drain_refusals_total``)."""

    def __init__(self, clock: Clock, count: Callable[[str, str], None] | None = None) -> None:
        self._clock = clock
        self._count = count
        self._open: dict[str, tuple[str, int, float]] = {}  # node -> (rail, refusals, since)

    def tick(self, refused: Sequence[DrainDecision]) -> None:
        now = self._clock.monotonic()  # for how long, in the log: a step of the wall clock is no refusal's length
        seen: set[str] = set()
        for d in refused:
            seen.add(d.node)
            if self._count is not None:
                self._count(d.node, str(d.verdict))
            rail, n, since = self._open.get(d.node, ("", 0, now))
            if rail == d.verdict:
                self._open[d.node] = (rail, n + 1, since)
                continue
            if rail:
                log.info("drain of %s refused %d times over %.0f s (%s); now: %s", d.node, n, now - since, rail,
                         d.reason)  # fmt: skip
            else:
                log.info("drain of %s refused: %s (logged again only when this changes)", d.node, d.reason)
            self._open[d.node] = (str(d.verdict), 1, now)
        for node in [n for n in self._open if n not in seen]:
            rail, n, since = self._open.pop(node)
            log.info("drain of %s no longer refused (%s, %d times over %.0f s)", node, rail, n, now - since)


class Actuation:
    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        clock: Clock,
        rails: DrainRails,
        drainer: Drainer,
        require_approval: bool = True,
        scaler: Actuator | None = None,
        poll_s: float = 0.5,
        on_refusal: Callable[[str, str], None] | None = None,
        fleet: FleetShare | None = None,
    ) -> None:
        self._sessions = sessions
        self._fleet = fleet
        self._fleet_stored: tuple[frozenset[str], float] | None = None  # the node set last stored, and when (monotonic)
        self._heartbeats = Heartbeats(clock)  # the other instances' refreshes, as this one saw them change
        self._clock = clock
        self.rails = rails
        self._drainer = drainer
        self._require_approval = require_approval
        self._scaler = scaler
        self._applied: dict[str, int] = {}
        self._poll_s = poll_s
        self._recovered = False
        self._refusals = RefusalLog(clock, on_refusal)
        self._snapshot: Snapshot | None = None  # the latest after_tick's: what the worker re-checks a drain against
        self._busy: dict[int, _Busy] = {}  # action id -> a drain the API server asked to wait (not tried before then)
        self._stays: dict[str, str] = {}  # node -> why its request stays requested (logged once per change)
        self._store = SaidOnce(log, "drain requests")  # skipped while the store is away: said once an outage
        self._unsettled: dict[int, Callable[[], None]] = {}  # action id -> its end's write, the store away when it ran

    async def after_tick(self, snapshot: Snapshot) -> None:
        """Request drains for flagged nodes and apply scaling; approved drains are the drain worker's."""
        self._snapshot = snapshot
        try:
            await asyncio.to_thread(self._request_drains, snapshot)
        except SQLAlchemyError as e:  # the store is away: drains wait for it (their audit must not be lost)
            self._store.failed(e)
        else:
            self._store.answered()
        if self._scaler is not None:
            # What this instance applied holds only while it decides the deployment: one whose shard moved to another
            # instance (absent from this tick's snapshot) may be scaled there meanwhile, so it is applied afresh when
            # its shard comes back, not skipped as already applied.
            self._applied = {k: v for k, v in self._applied.items() if k in snapshot.decisions}
            await self._scale(list(snapshot.decisions.values()))

    def not_leading(self) -> None:
        """This instance stopped acting (HA: another replica holds the Lease; sharding: no shard held): another
        scales meanwhile, so nothing this one applied is known to hold when it acts again."""
        self._applied.clear()

    # -- drains -------------------------------------------------------------------------------------------------

    def _request_drains(self, snap: Snapshot) -> None:
        placements = recheck.placements(snap)
        nodes = {p.node for p in placements} | {g.sample.node for g in snap.gpus}
        draining = {n for n, state in snap.node_drains.items() if state in ("approved", "executing")}
        now = self._clock.now()
        cordoned = self._cordoned(snap)
        spent = self._budget_spent(now, cordoned)
        fleet_nodes, fleet_flagged = (
            self._fleet_nodes(nodes, now, read=bool(recheck.flagged_nodes(snap)))
            if self._fleet is not None
            else (None, set())
        )
        decisions = decide(snap.findings, nodes=nodes, placements=placements, draining=draining, rails=self.rails,
                           budget_spent=spent, fleet_nodes=fleet_nodes, fleet_flagged=fleet_flagged)  # fmt: skip
        since = {f.id: f.since for f in snap.findings}
        self._refusals.tick([d for d in decisions if not d.approved])
        approved = {d.node for d in decisions if d.approved}
        self._stays = {n: why for n, why in self._stays.items() if n in approved}  # held back no more: said again
        with transaction(self._sessions) as s:
            for d in decisions:
                if not d.approved:
                    continue
                last = repo.latest_drain_for_node(session=s, node=d.node)
                # This episode of the condition already has its drain action (live or finished): see _covered.
                # Without approval, a request the store's rail held back (RailFull below) is approved when free; so
                # is, with approval, one the drain worker held back after its approval (recheck.held_back).
                again = last is not None and recheck.held_back(s, last, actor=ACTOR)
                if (
                    last is not None
                    and _covered(last, d.finding_ids, since)
                    and (last.state != DrainState.REQUESTED or (self._require_approval and not again))
                ):
                    continue
                row = repo.request_drain(
                    session=s,
                    node=d.node,
                    requested_by=ACTOR,
                    now=now,
                    dry_run=self.rails.dry_run,
                    reason=d.reason,
                    finding_id=d.finding_ids[0] if d.finding_ids else None,
                    evidence={**d.evidence, "finding_ids": ",".join(d.finding_ids)},
                )
                again = again and last is not None and row.id == last.id
                if (again or not self._require_approval) and row.state == DrainState.REQUESTED:
                    try:
                        with s.begin_nested():
                            repo.approve_drain(
                                session=s,
                                action_id=row.id,
                                actor=ACTOR,
                                now=now,
                                max_concurrent=self.rails.max_concurrent_nodes,
                                message=(
                                    "approved again: held back after its approval, the rails allow it now"
                                    if again
                                    else "drains.require_approval is off"
                                ),
                                budget=self.rails.budget,
                                budget_window_s=self.rails.budget_window_s,
                                cordoned=cordoned,
                            )
                    except (RailFull, InvalidTransition) as e:
                        if self._stays.get(d.node) != str(e):  # once per change, not every pass it lasts
                            log.info("drain of %s stays requested: %s (logged again only when this changes)", d.node, e)
                        self._stays[d.node] = str(e)
                    else:
                        self._stays.pop(d.node, None)
            flagged = recheck.flagged_nodes(snap)
            for row in repo.drains_in(session=s, states=(DrainState.REQUESTED.value,), limit=1000):
                why = recheck.withdrawn(s, row, actor=ACTOR, flagged=flagged)
                if why is not None:
                    self._withdraw(s, row.id, row.node, why)

    def _fleet_nodes(self, nodes: set[str], now: float, *, read: bool) -> tuple[set[str], set[str]]:
        """With sharding: this instance's node set stored (when it changed, or ``refresh_every_s`` after the last
        time: every pass, so that the others' breakers count it), then, when ``read`` (a node of ours is flagged: the
        breaker has something to decide), the live instances' nodes and, among them, those any instance flags."""
        fleet = self._fleet
        assert fleet is not None
        mine = frozenset(nodes)
        stored = self._fleet_stored
        at = self._clock.monotonic()  # a step of the wall clock back neither stops the refreshes nor hurries them
        due = stored is None or stored[0] != mine or at - stored[1] >= fleet.refresh_every_s
        if not (due or read):
            return set(mine), set()
        sets: dict[str, set[str]] = {}
        flagged: set[str] = set()
        me = fit(fleet.identity, 253)
        with transaction(self._sessions) as s:
            if due:
                repo.refresh_instance_nodes(session=s, instance=fleet.identity, nodes=mine, now=now)
                stored = (mine, at)
                if not read:  # the others' refreshes watched at this instance's own cadence, flagged or not
                    for i, t in repo.instance_refreshes(session=s).items():
                        if i != me:
                            self._live(i, t)
            if read:
                rows = repo.instance_node_sets(session=s)
                gone = {i: t for i, (_, t) in rows.items() if i != me and not self._live(i, t)}
                repo.forget_instances(session=s, refreshed=gone)  # watched unchanged for stale_after_s here
                sets = {i: v for i, (v, t) in rows.items() if i not in gone and self._counted(i, t, now)}
                flagged = repo.drain_flagged_nodes(session=s)
        self._fleet_stored = stored
        live = set(mine).union(*(v for k, v in sets.items() if k != fleet.identity))
        return live, flagged & live  # a finding left open on a node no live instance holds is not counted

    def _counted(self, instance: str, refreshed: float, now: float) -> bool:
        """Whether a live (not gone) instance's nodes count in the breaker's share: once its refresh was watched
        happening (``Heartbeats``), whatever either wall clock reads. Only a value this instance reads for the first
        time is placed by its stamp, within ``stale_after_s`` of ``now`` (before, every row was: a reader's wall clock
        stepped ahead, or writers' behind, left the others' nodes out of every count while the step lasted)."""
        assert self._fleet is not None
        beats = self._heartbeats
        if beats.trusted(instance):
            return True
        if refreshed >= now - self._fleet.stale_after_s:
            beats.trust(instance)
            return True
        return False

    def _cordoned(self, snap: Snapshot) -> set[str]:
        """The nodes kvpilot cordoned that are still cordoned, read from the API server only when a node is flagged and
        a real budget applies (dry runs cordon nothing); empty when the read fails (the store's count then stands
        alone, as before session 19)."""
        if self.rails.budget is None or self.rails.dry_run or not recheck.flagged_nodes(snap):
            return set()
        return self._drainer.cordoned() or set()

    def _budget_spent(self, now: float, cordoned: set[str]) -> int:
        """What counts against ``rails.budget`` now (0 without a budget: nothing to read): the store's drains
        (``repo.count_budget_drains``) and the nodes in ``cordoned`` none of them is about."""
        if self.rails.budget is None:
            return 0
        with transaction(self._sessions, reads_only=True) as s:  # approve_drain counts again under the rail
            since = now - self.rails.budget_window_s
            return repo.count_budget_drains(session=s, since=since, dry_run=self.rails.dry_run, cordoned=cordoned)

    # -- the drain worker -----------------------------------------------------------------------------------

    async def execute_approved(self, stop: asyncio.Event, *, leading: Callable[[], bool] = lambda: True) -> None:
        """Execute approved drains one at a time, oldest first, until none is left or ``stop`` is set.

        Each is claimed (approved → executing, compare-and-set, so two workers never run one drain) and runs in a
        worker thread; meanwhile its state is polled, and an operator's cancel or ``stop`` interrupts it. A
        drain stopped by ``stop``, or because this replica lost the Lease (``leading``), goes back to approved for
        the next leader; one found executing that no live worker runs (``_requeue_orphans``) likewise, and one the
        API server asked to wait longer than a call may take (``DrainResult.busy``), for the next pass."""
        for action_id, settle in list(self._unsettled.items()):  # ends the store could not take: first, in order
            del self._unsettled[action_id]
            await self._settle(action_id, settle)  # the store still away: raised, and the worker says so (once)
        await asyncio.to_thread(self._requeue_orphans, not self._recovered)
        self._recovered = True
        approved = await asyncio.to_thread(self._approved)
        for gone in set(self._busy) - {a[0] for a in approved}:  # cancelled, withdrawn or held meanwhile
            del self._busy[gone]
        for action_id, node, dry_run, reason, stored in approved:
            if stop.is_set():
                return
            if not await asyncio.to_thread(self._still_wanted, action_id):
                continue  # withdrawn (its finding closed) or held (the last-ready-replica rail): recheck
            busy = self._busy.get(action_id)
            if busy is None and stored is not None:  # told to wait before this process (or this holder) had it
                left = max(0.0, stored[0] - self._clock.now())  # the stored end is wall time
                busy = self._busy[action_id] = _Busy(self._clock.monotonic() + left, stored[1], ())
            if busy is not None and self._clock.monotonic() < busy.not_before:
                continue  # the API server asked it to wait: not tried (nor audited) again before then
            attempt = await asyncio.to_thread(self._claim, action_id)
            if attempt is None:
                continue  # cancelled or claimed meanwhile
            interrupt, lost = threading.Event(), threading.Event()

            def should_stop(interrupt: threading.Event = interrupt, lost: threading.Event = lost) -> bool:
                # Asked before each eviction, in the drain's thread: an old leader starts no eviction once it no
                # longer leads. Before, only the watch below saw it, every poll_s: until then the old leader went on
                # evicting beside the new leader's run of the same drain (requeued at its first pass).
                if not interrupt.is_set() and not leading():
                    lost.set()
                return interrupt.is_set() or lost.is_set()

            steps = _LiveSteps(() if busy is None else busy.steps)
            drain = partial(self._drainer.drain, node, dry_run=dry_run, reason=reason, interrupt=interrupt)
            run = asyncio.ensure_future(asyncio.to_thread(drain, should_stop=should_stop, on_step=steps.add))
            cancelled_by = await self._watch(action_id, run, interrupt, stop, leading, steps)
            if cancelled_by is None and lost.is_set():  # stopped by the drainer's own check, before the watch's
                cancelled_by = "shutdown"
            try:
                result = await run
            except Exception as e:
                log.exception("drain of %s raised", node)
                await self._settle(action_id, partial(self._fail, action_id, attempt, f"drain raised: {e}"))
                continue
            tried = _step_keys(result.records)  # this try's steps, for the next try's comparison
            steps.skip_repeats()
            del result.records[: steps.written]  # already in its audit trail (written while it ran, or by the last try)
            if cancelled_by == "shutdown" and result.cancelled:
                await asyncio.to_thread(self._audit_steps, action_id, result)
                why = "interrupted by shutdown or a lost Lease; the next leader resumes"
                await asyncio.to_thread(self._requeue, action_id, why, attempt)
                return
            if result.busy and cancelled_by != "cancel":  # the API server asked to wait longer than a call may take
                await self._settle(action_id, partial(self._wait_busy, action_id, attempt, result, tried))
                continue
            self._busy.pop(action_id, None)
            await self._settle(action_id, partial(self._finish, action_id, attempt, result))

    async def _settle(self, action_id: int, settle: Callable[[], None]) -> None:
        """Write how a drain that ran ended (its steps and state), now or, when the store cannot take it, at the start
        of each later pass until it can. Before, a drain that ended while the store was away (a PostgreSQL failover, a
        drain given up on after its PDB deadline meanwhile) stayed `executing` until a restart: its steps and outcome
        never written, and its slot under drains.max_concurrent held (every other approval a 409).

        Each write moves the drain only out of the attempt this worker claimed (``_ours``): an end kept while this
        instance lost the Lease, and another leader requeued and ran the drain again, is audited as steps but does
        not close the other leader's run."""
        try:
            await asyncio.to_thread(settle)
        except SQLAlchemyError:  # kept for the next pass; any other error is the write's own, raised once as before
            self._unsettled[action_id] = settle
            raise

    async def _watch(
        self,
        action_id: int,
        run: asyncio.Future[DrainResult],
        interrupt: threading.Event,
        stop: asyncio.Event,
        leading: Callable[[], bool],
        steps: _LiveSteps,
    ) -> str | None:
        """Until ``run`` ends: interrupt it on ``stop`` or when an operator cancelled the action, and write the steps
        of a drain that waits on an eviction as they come (``_LiveSteps``). The state read and the steps' write each
        run in a thread; while one is outstanding (a hung store) no second one starts."""
        check: asyncio.Future[str | None] | None = None
        note: asyncio.Future[int] | None = None
        why: str | None = None
        while not run.done():
            await asyncio.wait({run}, timeout=self._poll_s)
            if note is not None and note.done():
                steps.written += 0 if note.exception() else note.result()  # the store away: tried again
                note = None
            if note is None and (due := steps.due()):
                note = asyncio.ensure_future(asyncio.to_thread(self._note_live, action_id, due))
            if run.done() or interrupt.is_set():
                continue
            if stop.is_set() or not leading():
                why = "shutdown"
                interrupt.set()
                continue
            if check is None:
                check = asyncio.ensure_future(asyncio.to_thread(self._state, action_id))
            elif check.done():
                state = None if check.exception() else check.result()
                check = None
                if state == DrainState.CANCELLED.value:
                    why = "cancel"
                    interrupt.set()
        if check is not None:  # still reading when the drain ended: its answer (or the store's error) is not needed
            check.add_done_callback(lambda f: f.cancelled() or f.exception())
        if note is not None:  # still writing: what it wrote is not written again at the end
            with contextlib.suppress(Exception):
                steps.written += await note
        return why

    # The worker's reads (the approved drains, the state polled for a cancel, the executing ones found at start) are
    # read-only units: on SQLite they read the last committed state beside another connection's write (another
    # kvpilot, the API's approval) rather than wait out the busy timeout behind it (store.db.READS_ONLY).

    def _approved(self) -> list[tuple[int, str, bool, str, tuple[float, int] | None]]:
        """The approved drains, oldest first, each with the wait stored for it (``BUSY_NOT_BEFORE``), if any."""
        with transaction(self._sessions, reads_only=True) as s:
            rows = repo.drains_in(session=s, states=(DrainState.APPROVED.value,), limit=100)
            now = self._clock.now()
            return [
                (r.id, r.node, r.dry_run, r.reason, _stored_wait(r, now=now)) for r in sorted(rows, key=lambda r: r.id)
            ]

    def _state(self, action_id: int) -> str | None:
        with transaction(self._sessions, reads_only=True) as s:
            return repo.get_drain(session=s, action_id=action_id).state

    def _still_wanted(self, action_id: int) -> bool:
        """A drain kvpilot requested, approved maybe hours later: withdrawn if its finding closed, held back (to
        requested, freeing its rail slot; approved again by ``_request_drains`` once the rails allow) while its node
        holds a deployment's last ready replica (``recheck``). An operator's drain is always wanted."""
        with transaction(self._sessions) as s:
            row = repo.get_drain(session=s, action_id=action_id)
            if row.state != DrainState.APPROVED:
                return False
            why = recheck.withdrawn(s, row, actor=ACTOR, flagged=recheck.flagged_nodes(self._snapshot))
            if why is not None:
                self._withdraw(s, action_id, row.node, why)
                return False
            executing = repo.drains_in(session=s, states=(DrainState.EXECUTING.value,), limit=1000)
            hold = recheck.held(row, self._snapshot, actor=ACTOR, draining={r.node for r in executing})
            if hold is None:
                return True
            log.info("drain of %s %s", row.node, hold)
            with contextlib.suppress(InvalidTransition), s.begin_nested():  # cancelled or claimed meanwhile
                held = repo.transition_drain(
                    session=s, action_id=action_id, to=DrainState.REQUESTED, actor=ACTOR, now=self._clock.now(),
                    message=hold,
                )  # fmt: skip
                _forget_wait(held)
            return False

    def _withdraw(self, s: Session, action_id: int, node: str, why: str) -> None:
        log.info("drain of %s %s", node, why)
        with contextlib.suppress(InvalidTransition), s.begin_nested():  # cancelled or claimed meanwhile
            repo.transition_drain(
                session=s, action_id=action_id, to=DrainState.CANCELLED, actor=ACTOR, now=self._clock.now(), message=why
            )

    def _claim(self, action_id: int) -> int | None:
        """approved → executing; the attempt claimed (``repo.drain_attempt``), None when cancelled or claimed
        meanwhile."""
        # the instance named as the store names it (refresh_instance_nodes clips it to 253 characters): named whole,
        # the claim of an instance with a longer ha.identity read as one gone's, and another ran its drain too
        by = "executing" if self._fleet is None else f"{CLAIMED_BY}{fit(self._fleet.identity, 253)}"
        try:
            with transaction(self._sessions) as s:
                row = repo.transition_drain(
                    session=s, action_id=action_id, to=DrainState.EXECUTING, actor=ACTOR, now=self._clock.now(),
                    message=by,
                )  # fmt: skip
                _forget_wait(row)  # tried now: a wait it is told next is written after this try
                return repo.drain_attempt(session=s, action_id=action_id)
        except InvalidTransition:
            return None

    def _ours(self, s: Session, action_id: int, attempt: int | None) -> bool:
        """Whether the drain is still executing the run ``attempt`` claimed (None: whichever run, the requeue of the
        drains found executing at start). Not when another leader, while this instance had lost the Lease, requeued
        it and claimed it again: an end this worker kept through a store outage would then close that run, with this
        run's result, while it still drains the node."""
        if attempt is None:
            return True
        # held until this write: another leader's requeue and claim landing between this check and the write (read
        # committed) would leave the state executing, another run's, and this run's end would close it
        row = repo.get_drain(session=s, action_id=action_id, lock=True)
        if row.state != DrainState.EXECUTING or repo.drain_attempt(session=s, action_id=action_id) == attempt:
            return True  # not executing: the transition's own check says what holds (cancelled: the operator's word)
        log.warning(
            "drain of %s: another leader ran it again since this instance claimed it; this run's end is audited as "
            "steps, and that run's end is the drain's",
            row.node,
        )
        return False

    def _requeue(self, action_id: int, message: str, attempt: int | None = None) -> None:
        # InvalidTransition: cancelled meanwhile, and the operator's word stands; or no longer executing (another
        # worker requeued it and held it back to requested): approving it again is for the rails, not a requeue.
        with transaction(self._sessions) as s, contextlib.suppress(InvalidTransition):
            if not self._ours(s, action_id, attempt):
                return
            repo.transition_drain(
                session=s, action_id=action_id, to=DrainState.APPROVED, actor=ACTOR, now=self._clock.now(),
                message=message, expect=DrainState.EXECUTING,
            )  # fmt: skip

    def _requeue_orphans(self, first: bool) -> None:
        """At the start of each pass (this worker runs no drain then): the drains executing that no live worker runs
        go back to approved, to be claimed again. Without sharding one leader runs drains, so every drain executing
        is one a leader that stopped or lost the Lease left (before, only at this process's first pass: a standby
        that had led before and led again after the other leader died mid-drain left it executing, its
        drains.max_concurrent slot held, until a restart). With sharding several instances run drains on one store:
        one claimed by another instance that still refreshes its nodes (``Heartbeats``: its stored refresh seen to
        change within ``stale_after_s`` of this instance's monotonic clock, whatever either wall clock reads) is left
        to it (before, every instance's start requeued it, and both drained the node at once); one claimed by an
        instance gone, or by this one's identity (a restart of it), is requeued; one whose claim names no instance (a
        version before this) only at this process's first pass, as before."""
        with transaction(self._sessions, reads_only=True) as s:  # each requeue is its own writing unit
            rows = repo.drains_in(session=s, states=(DrainState.EXECUTING.value,), limit=1000)  # one query a pass
            if not rows:
                return
            claims = {r.id: repo.drain_claim(session=s, action_id=r.id) for r in rows}
            me = None if self._fleet is None else fit(self._fleet.identity, 253)
            by_of = {i: _claimer(c.message if c is not None else "") for i, c in claims.items()}
            others = {b for b in by_of.values() if b is not None and b != me}
            refreshed = repo.instance_refreshes(session=s, instances=others) if others else {}
        live = {b for b in others if self._live(b, refreshed.get(b))}
        for r in rows:
            message = "found executing at start; resumed" if first else RESUMED
            if self._fleet is not None:
                by = by_of[r.id]
                if by is None and not first:
                    continue
                if by is not None and by != me and by in live:
                    continue  # another instance's, live: its own worker ends it
                if by is not None and not first:
                    message = f"found executing on {by}, which no longer refreshes its nodes; resumed"
            self._requeue(r.id, message)

    def _live(self, instance: str, refreshed: float | None) -> bool:
        """Whether ``instance`` (its stored refresh ``refreshed``, None without a row) is live (``Heartbeats``)."""
        assert self._fleet is not None
        return self._heartbeats.live(instance, refreshed, self._fleet.stale_after_s)

    def _wait_busy(
        self, action_id: int, attempt: int | None, result: DrainResult, tried: tuple[tuple[str, str, str], ...]
    ) -> None:
        """Back to approved, not tried again before a backoff (``BUSY_FIRST_S`` doubling to ``BUSY_MAX_S``, at least
        the Retry-After asked): before, it was tried every pass (each tick), each try writing its steps. A try's
        steps (``tried``, all of them) are audited from where they differ from the last try's (a state change), not
        on every try: ``result.records`` holds only those not yet on the trail (``_LiveSteps``)."""
        now = self._clock.now()
        last = self._busy.get(action_id)
        tries = 1 if last is None else last.tries + 1
        delay = min(BUSY_MAX_S, BUSY_FIRST_S * 2 ** (tries - 1))
        delay = max(delay, result.retry_after_s or 0.0)
        self._busy[action_id] = _Busy(self._clock.monotonic() + delay, tries, tried)
        with transaction(self._sessions) as s:
            _note_steps(s, action_id, result)
            if not self._ours(s, action_id, attempt):
                return
            with contextlib.suppress(InvalidTransition):  # cancelled or held back meanwhile, as in _requeue
                row = repo.transition_drain(
                    session=s, action_id=action_id, to=DrainState.APPROVED, actor=ACTOR, now=now,
                    message=f"{result.busy} (try {tries}; next try in {delay:g} s)", expect=DrainState.EXECUTING,
                )  # fmt: skip
                row.evidence = {
                    **(row.evidence or {}),
                    BUSY_NOT_BEFORE: now + delay,
                    BUSY_TRIES: tries,
                    BUSY_WAIT_S: delay,
                }

    def _audit_steps(self, action_id: int, result: DrainResult) -> None:
        with transaction(self._sessions) as s:
            _note_steps(s, action_id, result)

    def _note_live(self, action_id: int, records: list[AuditRecord]) -> int:
        """Steps of a drain still running, on its audit trail now; how many were written. An eviction that waits is
        said in the log as well, once a pod (the drainer makes one such step per pod and kind of refusal): the log
        said nothing for the minutes a budget held a drain."""
        with transaction(self._sessions) as s:
            _note_records(s, action_id, records)
        for r in records:
            if r.step == "evict" and r.outcome is Outcome.RETRY:
                log.info("drain %d of %s waits: %s", action_id, r.node, r.message)
        return len(records)

    def _fail(self, action_id: int, attempt: int | None, message: str) -> None:
        with transaction(self._sessions) as s:
            if self._ours(s, action_id, attempt):
                repo.transition_drain(
                    session=s, action_id=action_id, to=DrainState.FAILED, actor=ACTOR, now=self._clock.now(),
                    message=message,
                )  # fmt: skip

    def _finish(self, action_id: int, attempt: int | None, result: DrainResult) -> None:
        now = self._clock.now()
        with transaction(self._sessions) as s:
            _note_steps(s, action_id, result)  # whatever the state now: a cancel leaves the node cordoned, say so
            if repo.get_drain(session=s, action_id=action_id).state != DrainState.EXECUTING:
                return  # cancelled meanwhile: the operator's word stands
            if not self._ours(s, action_id, attempt):
                return
            if result.complete:
                done = "dry run complete" if result.dry_run else f"evicted {len(result.evicted)} pod(s)"
                to, message = DrainState.DONE, done
            else:
                why = f"blocked: {', '.join(result.blocked)}" if result.blocked else "a step failed"
                to, message = DrainState.FAILED, why
            try:
                with s.begin_nested():
                    repo.transition_drain(session=s, action_id=action_id, to=to, actor=ACTOR, now=now, message=message)
            except InvalidTransition:
                pass  # cancelled between the check above and now: the operator's word stands

    # -- scaling ------------------------------------------------------------------------------------------------

    async def _scale(self, decisions: Sequence[Decision]) -> None:
        assert self._scaler is not None
        for d in decisions:
            target = scale_target(d)
            if self._applied.get(d.deployment) == target:
                continue
            try:
                await asyncio.to_thread(self._scaler.apply, d)
                self._applied[d.deployment] = target
            except ActuationError as e:
                log.error("scaling %s failed (%s): %s", d.deployment, "will retry" if e.retryable else "giving up", e)
                if not e.retryable:
                    self._applied[d.deployment] = target


def _stored_wait(row: DrainActionRow, *, now: float | None = None) -> tuple[float, int] | None:
    """(not before, tries) of the wait ``_wait_busy`` stored in the drain's row; None without one (or unreadable).
    Read at ``now``, the end is never later than ``now`` plus the wait asked (``BUSY_WAIT_S``; ``BUSY_MAX_S`` where
    the row has none): a wall clock that differs from the writer's delays the drain by one wait at most."""
    evidence = row.evidence if isinstance(row.evidence, dict) else {}
    not_before, tries = evidence.get(BUSY_NOT_BEFORE), evidence.get(BUSY_TRIES)
    if not isinstance(not_before, int | float) or isinstance(not_before, bool) or not isinstance(tries, int):
        return None
    end = float(not_before)
    if now is not None:
        wait = evidence.get(BUSY_WAIT_S)
        most = BUSY_MAX_S
        if isinstance(wait, int | float) and not isinstance(wait, bool) and math.isfinite(wait) and wait >= 0:
            most = float(wait)
        end = min(end, now + most) if math.isfinite(end) else now + BUSY_MAX_S
    return end, max(1, tries)


def _claimer(message: str) -> str | None:
    """The instance a claim's audit message names (``CLAIMED_BY``), None for one that names none."""
    return message[len(CLAIMED_BY) :] if message.startswith(CLAIMED_BY) else None


def _forget_wait(row: DrainActionRow) -> None:
    keys = (BUSY_NOT_BEFORE, BUSY_TRIES, BUSY_WAIT_S)
    if isinstance(row.evidence, dict) and any(k in row.evidence for k in keys):
        row.evidence = {k: v for k, v in row.evidence.items() if k not in keys}


class SimulatorScaler:
    """``direct`` mode against the embedded simulator: its control API stands in for ``deployments/scale``, so the
    zero-config demo closes the loop (decisions change the replica count the next ticks observe)."""

    mode = "direct"

    def __init__(self, base_url: str, *, timeout_s: float = 2.0) -> None:
        self._url = base_url.rstrip("/") + "/control/replicas"
        self._timeout_s = timeout_s

    def apply(self, decision: Decision) -> ActuationResult:
        import httpx

        target = scale_target(decision)
        try:
            r = httpx.post(self._url, json={"count": target}, timeout=self._timeout_s, trust_env=False)
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise ActuationError(f"simulator: scaling {decision.deployment} to {target}: {e}", retryable=True) from e
        message = f"simulator: {decision.deployment} {decision.current_replicas} -> {target} replicas"
        log.info(message)
        return ActuationResult(decision.deployment, self.mode, decision.current_replicas, target, True, 1, message)


def _covered(action: DrainActionRow, finding_ids: Sequence[str], since: dict[str, float]) -> bool:
    """Whether ``action`` (the node's latest drain) already answers the node's findings ``finding_ids``: one of them is
    a finding it was requested for (every finding flagging the node then is recorded, in ``evidence["finding_ids"]``)
    and this episode of it (a finding's id is its kind and subject, so the same GPU failing again after a repair is a
    new episode: a later ``since``) began before the request; or the action has ended and every one of them opened
    before it ended, so the drain ran, or was refused, while they were open. Before, only the first finding was
    recorded: on a node flagged by two GPUs, once that one closed, a drained node was requested again."""
    recorded = {action.finding_id, *str((action.evidence or {}).get("finding_ids") or "").split(",")} - {None, ""}
    if any(f in recorded and action.requested_at >= since[f] for f in finding_ids):
        return True
    ended = action.state in (DrainState.DONE, DrainState.FAILED, DrainState.CANCELLED)
    return ended and bool(finding_ids) and all(since[f] <= action.updated_at for f in finding_ids)


class _LiveSteps:
    """A drain's steps as its thread makes them. An eviction a PodDisruptionBudget refuses (or the API server throttles)
    is retried for up to ``Backoff.deadline_s`` (600 s) a pod, and a drain's steps were written only when it ended: for
    those minutes ``GET /v1/drains/{id}`` said `executing` and nothing else, not even that the node was cordoned.
    From a drain's first eviction that waits, its steps so far and each later one are written as they come (``due``);
    a drain that ends without waiting writes them at its end, as before.

    A try after a busy API server's wait (``last``: the steps of the try before) writes its steps only from the first
    that differs from that try's: the ones before are on the trail already. Before (session 31), a drain that waited
    on a budget and was then told to wait by the API server wrote every try's steps again, once a backoff."""

    def __init__(self, last: tuple[tuple[str, str, str], ...] = ()) -> None:
        self._records: list[AuditRecord] = []  # appended in the drain's thread, read on the event loop
        self._waiting = False
        self._last = last  # the repeats of the last try not yet passed; () once this try differs
        self.written = 0  # records on the trail: written, or repeats of the last try's

    def skip_repeats(self) -> None:
        """Count as written the records that repeat the last try's, from the first not written to the first that
        differs."""
        while self._last and self.written < len(self._records):
            if self.written < len(self._last) and _step_key(self._records[self.written]) == self._last[self.written]:
                self.written += 1
            else:
                self._last = ()

    def add(self, record: AuditRecord) -> None:
        self._records.append(record)
        if record.step == "evict" and record.outcome is Outcome.RETRY:
            self._waiting = True

    def due(self) -> list[AuditRecord]:
        if not self._waiting:
            return []
        self.skip_repeats()
        return self._records[self.written :]


def _step_key(r: AuditRecord) -> tuple[str, str, str]:
    """What tells a try's step from the last one's: step, target and outcome (messages carry times and counts)."""
    return r.step, r.target, str(r.outcome)


def _step_keys(records: Sequence[AuditRecord]) -> tuple[tuple[str, str, str], ...]:
    return tuple(_step_key(r) for r in records)


def _note_steps(session: Session, action_id: int, result: DrainResult) -> None:
    """Each step of a drain (cordon, taint, each eviction) as a note on its action's audit trail."""
    _note_records(session, action_id, result.records)


def _note_records(session: Session, action_id: int, records: Sequence[AuditRecord]) -> None:
    for r in records:
        repo.note_drain(
            session=session,
            action_id=action_id,
            actor=r.actor,
            now=r.at,
            message=f"{r.step} {r.target}: {r.outcome.value} {r.message}".strip(),
        )
