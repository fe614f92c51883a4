"""A drain's end kept through a store outage does not close another leader's run of it (session 25, E).

The old leader ran a drain that ended (a PDB held, given up on) while the store was away: it kept the end for a later
pass (28c3b0e). Meanwhile it lost the Lease; the new leader found the drain executing, requeued it and ran it again.
The old leader led again while that run still drained the node, and its first pass wrote the kept end: ``_finish``
checked only that the state read `executing`, so the new run was closed `failed` with the old run's result, and its
own end (the node drained) was dropped. Now each end moves the drain only out of the attempt its worker claimed
(``repo.drain_attempt``); the kept end is audited as steps. SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.audit import AuditRecord, Outcome
from kvpilot.actuation.drain import DrainResult
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from tests.helpers.drains import Pools


class _Away:
    """A session factory whose store goes away while ``away`` is set (each unit fails to begin, as a stopped
    PostgreSQL or an unreachable SQLite file fails it)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self.away = threading.Event()

    def __call__(self) -> Session:
        if self.away.is_set():
            raise OperationalError("BEGIN", None, ConnectionRefusedError("the store is away"))
        return self._sessions()


class _Drainer:
    def __init__(self, run: Callable[[str], DrainResult]) -> None:
        self._run = run

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        **_: object,
    ) -> DrainResult:
        return self._run(node)

    def cordoned(self) -> set[str] | None:
        return set()


async def test_an_end_kept_through_an_outage_does_not_close_another_leaders_run(pools: Pools) -> None:
    old_sessions, new_sessions = pools
    clock = VirtualClock(1000.0)
    with transaction(new_sessions) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=clock.now(), dry_run=False).id
        repo.approve_drain(session=s, action_id=a, actor="kvpilot", now=clock.now(), max_concurrent=1)

    away = _Away(old_sessions)

    old_runs: list[str] = []

    def blocked(node: str) -> DrainResult:  # the old leader's run: its first ends as the store goes away
        old_runs.append(node)
        if len(old_runs) == 1:
            away.away.set()
        step = AuditRecord(clock.now(), node, "evict", "ml/chat-0", Outcome.BLOCKED, "PDB kept refusing", False)
        return DrainResult(node, False, records=[step], blocked=["ml/chat-0"])

    old = Actuation(sessions=away, clock=clock, rails=DrainRails(dry_run=False), drainer=_Drainer(blocked), poll_s=0.05)
    old._recovered = True  # nothing executing at its start
    kept = None
    try:
        await asyncio.wait_for(old.execute_approved(asyncio.Event()), 60)  # a hang guard only
    except SQLAlchemyError as e:
        kept = e
    assert kept is not None  # its end kept for a later pass (28c3b0e)
    assert a in old._unsettled
    away.away.clear()  # the store back; the old leader lost the Lease meanwhile

    seen_during: list[str] = []

    def drained(node: str) -> DrainResult:  # the new leader's run, during which the old one leads again
        async def old_leads_again() -> None:
            await old.execute_approved(asyncio.Event())

        asyncio.run(asyncio.wait_for(old_leads_again(), 60))
        with transaction(new_sessions) as s:
            seen_during.append(repo.get_drain(session=s, action_id=a).state)
        return DrainResult(node, False, evicted=["ml/chat-0"])

    new = Actuation(
        sessions=new_sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=_Drainer(drained), poll_s=0.05
    )
    await asyncio.wait_for(new.execute_approved(asyncio.Event()), 60)  # requeues the executing drain, runs it

    with transaction(new_sessions) as s:
        events = repo.list_drain_events(session=s, action_id=a)
        state = repo.get_drain(session=s, action_id=a).state
    moves = [(e.from_state, e.to_state) for e in events if e.from_state != e.to_state]
    # before: the new run closed failed with the old run's kept end (executing -> failed) while it still drained
    # the node, and its own end dropped. Now the kept end is audited, not applied; the old leader, leading again
    # (the new one has lost the Lease and stops), resumes the drain the new one left and its own run ends it.
    assert moves == [(None, "requested"), ("requested", "approved"), ("approved", "executing"),
                     ("executing", "approved"), ("approved", "executing"),
                     ("executing", "approved"), ("approved", "executing"), ("executing", "failed")]  # fmt: skip
    assert (len(old_runs), seen_during, state) == (2, [DrainState.FAILED.value], DrainState.FAILED.value)
    assert any("PDB kept refusing" in e.message for e in events)  # the old run's steps audited
    assert a not in old._unsettled
