"""The drain worker's requeue does not approve a drain another worker held back meanwhile (session 19, H).

Two workers at once (a leadership overlap: the old leader still running a drain, the new one starting): the new one
finds the drain executing and requeues it (executing → approved), holds it back (approved → requested: its node holds
a deployment's last ready replica), and the freed ``drains.max_concurrent`` slot goes to another drain. The old
leader's requeue (interrupted by the lost Lease) or busy wait (the API server asked to wait) then moved it to approved
again: ``transition_drain(to=approved)`` took the state it read, and requested → approved is legal, so it passed the
rail with no check: 2 active at max_concurrent 1. Now the worker moves it from executing only
(``expect=executing``): the drain stays requested, for the rails to approve again. SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation
from kvpilot.actuation.drain import DrainResult
from store import repo
from store.db import make_engine, session_factory, transaction
from store.drain_states import DrainState
from store.errors import InvalidTransition
from tests.helpers.drains import Pools
from tests.reliability.conftest import Store

HOLD = "held: n0 now holds the last ready replica of ml/x; back to requested"
BUSY = "cordon n0: the API server asks to wait 30 s"


class _Overlapped:
    """A drainer during whose drain of n0 another worker (the new leader, its own pool) requeues the executing drain,
    holds it back and approves ``other`` in the freed slot. Then the drain ends as ``busy`` says: told to wait (the
    old worker's ``_wait_busy``), or, with ``busy`` empty, interrupted by ``lost_lease`` (its ``_requeue``)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        clock: VirtualClock,
        other: int,
        busy: str,
        lost_lease: Callable[[], None],
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._other = other
        self._busy = busy
        self._lost_lease = lost_lease

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        **_: object,
    ) -> DrainResult:
        leader = Actuation(
            sessions=self._sessions, clock=self._clock, rails=DrainRails(dry_run=False), drainer=self, poll_s=0.05
        )
        leader._requeue_orphans(True)  # the new leader's first pass
        with transaction(self._sessions) as s:  # its re-check holds it back (as Actuation._still_wanted)
            (held,) = repo.drains_in(session=s, states=(DrainState.APPROVED.value,), limit=10)
            repo.transition_drain(
                session=s, action_id=held.id, to=DrainState.REQUESTED, actor="kvpilot", now=self._clock.now(),
                message=HOLD,
            )  # fmt: skip
        with transaction(self._sessions) as s:  # as _request_drains: the rail gives the slot to the other drain
            repo.approve_drain(
                session=s, action_id=self._other, actor="kvpilot", now=self._clock.now(), max_concurrent=1
            )
        if self._busy:
            return DrainResult(node, dry_run, busy=self._busy, retry_after_s=30.0)
        self._lost_lease()
        assert interrupt is not None
        assert interrupt.wait(60)  # a hang guard only: the worker's next poll interrupts it
        return DrainResult(node, dry_run, cancelled=True)

    def cordoned(self) -> set[str] | None:
        return set()


async def _race(pools: Pools, busy: str) -> tuple[str, str, int, list[tuple[str | None, str]]]:
    """n0's drain approved and run by the old worker, n1's requested waiting for the slot (kvpilot's, no finding):
    n0's state, n1's, the drains active, n0's transitions."""
    # two kvpilots: their own pools; waits bounded by a minute, so that a loaded machine does not fail the test
    old, new = pools
    clock = VirtualClock(1000.0)
    with transaction(old) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=clock.now(), dry_run=False).id
        repo.approve_drain(session=s, action_id=a, actor="kvpilot", now=clock.now(), max_concurrent=1)
        b = repo.request_drain(session=s, node="n1", requested_by="kvpilot", now=clock.now(), dry_run=False).id
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    drainer = _Overlapped(new, clock, b, busy, lost_lease=lambda: loop.call_soon_threadsafe(stop.set))
    worker = Actuation(sessions=old, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.05)
    worker._recovered = True  # nothing executing at its start: the drain below is its own
    await asyncio.wait_for(worker.execute_approved(stop), 60)  # a hang guard only
    with transaction(old) as s:
        moves = [(e.from_state, e.to_state) for e in repo.list_drain_events(session=s, action_id=a)]
        return (
            repo.get_drain(session=s, action_id=a).state,
            repo.get_drain(session=s, action_id=b).state,
            repo.count_active_drains(session=s),
            [m for m in moves if m[0] != m[1]],
        )


HELD_CHAIN = [(None, "requested"), ("requested", "approved"), ("approved", "executing"), ("executing", "approved"),
              ("approved", "requested")]  # fmt: skip


@pytest.mark.parametrize("busy", ["", BUSY], ids=["requeue-on-lost-lease", "busy-wait"])
async def test_a_drain_held_back_meanwhile_is_not_requeued_past_the_rail(pools: Pools, busy: str) -> None:
    state, other, active, moves = await _race(pools, busy)
    # before (c7f6298): approved, 2 active at max_concurrent 1, the chain ending requested -> approved
    assert (state, other, active) == ("requested", "approved", 1)
    assert moves == HELD_CHAIN


def test_transition_drain_from_an_expected_state_only(store: Store) -> None:
    engine = make_engine(store.url)
    sessions = session_factory(engine)
    with transaction(sessions) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=1.0, dry_run=False).id
    with pytest.raises(InvalidTransition, match="requested"), transaction(sessions) as s:
        repo.transition_drain(
            session=s, action_id=a, to=DrainState.APPROVED, actor="kvpilot", now=2.0, expect=DrainState.EXECUTING
        )
    with transaction(sessions) as s:
        assert repo.get_drain(session=s, action_id=a).state == "requested"
        assert len(repo.list_drain_events(session=s, action_id=a)) == 1
        repo.transition_drain(
            session=s, action_id=a, to=DrainState.CANCELLED, actor="kvpilot", now=3.0, expect=DrainState.REQUESTED
        )
    engine.dispose()
