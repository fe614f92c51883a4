"""Drains found executing: requeued when no live worker runs them, left alone when one does (session 25, E).

The worker requeued every executing drain once, at its process's first pass. Two cases went wrong:
- With sharding several instances lead at once and run drains on one store: an instance starting (a rollout of
  kvpilot) requeued a drain another, live, instance was running, claimed it and drained the node too, both at once.
- Without sharding, a standby that had led before (its first pass done) and led again after the other leader died
  mid-drain never requeued that drain: it stayed executing, its drains.max_concurrent slot held, until a restart.
Now a claim names its instance with sharding, a drain claimed by a live instance (``repo.live_instances``) is left
to it, and the drains no live worker runs are requeued at the start of every pass. SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation, FleetShare
from kvpilot.actuation.drain import DrainResult
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from tests.helpers.drains import Pools


class _Drainer:
    """Notes each drain it runs under its name, and ends it once ``release`` is set."""

    def __init__(self, name: str, runs: list[str], release: threading.Event) -> None:
        self._name, self._runs, self._release = name, runs, release

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        **_: object,
    ) -> DrainResult:
        self._runs.append(self._name)
        assert self._release.wait(60)  # a hang guard only
        return DrainResult(node, False, evicted=["ml/chat-0"])

    def cordoned(self) -> set[str] | None:
        return set()


def _approved_drain(sessions, clock: VirtualClock) -> int:  # type: ignore[no-untyped-def]
    with transaction(sessions) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=clock.now(), dry_run=False).id
        repo.approve_drain(session=s, action_id=a, actor="kvpilot", now=clock.now(), max_concurrent=1)
    return a


def _state(sessions, action: int) -> str:  # type: ignore[no-untyped-def]
    with transaction(sessions) as s:
        return repo.get_drain(session=s, action_id=action).state


def _sharded(
    name: str, sessions: sessionmaker[Session], clock: VirtualClock, runs: list[str], release: threading.Event
) -> Actuation:
    """Instance ``name`` with sharding (live while it refreshes within three lease periods of 15 s)."""
    share = FleetShare(name, stale_after_s=45.0, refresh_every_s=15.0)
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False),
                     drainer=_Drainer(name, runs, release), poll_s=0.05, fleet=share)  # fmt: skip


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within 30 s: {what}")


async def test_a_sharded_instance_starting_leaves_a_live_instances_drain_to_it(pools: Pools) -> None:
    s1, s2 = pools
    clock = VirtualClock(1000.0)
    a = _approved_drain(s1, clock)
    runs: list[str] = []
    release = threading.Event()
    at_once = threading.Event()
    at_once.set()  # two's drains end at once: on the parent, its run of n0 is seen, not waited for
    one, two = _sharded("kvpilot-a", s1, clock, runs, release), _sharded("kvpilot-b", s2, clock, runs, at_once)
    with transaction(s1) as s:  # one holds shards: its node set refreshed (as its after_tick does)
        repo.refresh_instance_nodes(session=s, instance="kvpilot-a", nodes=["n0"], now=clock.now())
    first = asyncio.ensure_future(one.execute_approved(asyncio.Event()))
    await _until(lambda: runs == ["kvpilot-a"], "instance one draining n0")
    await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)  # two starts: its first pass
    # before: two requeued one's drain, claimed it and drained n0 as well: ['kvpilot-a', 'kvpilot-b']
    assert runs == ["kvpilot-a"]
    assert _state(s2, a) == "executing"
    release.set()
    await asyncio.wait_for(first, 60)
    assert _state(s2, a) == "done"


async def test_a_sharded_instances_drain_is_resumed_once_it_is_gone(pools: Pools) -> None:
    s1, s2 = pools
    clock = VirtualClock(1000.0)
    a = _approved_drain(s1, clock)
    runs: list[str] = []
    release = threading.Event()
    release.set()
    with transaction(s1) as s:  # instance one claimed the drain, then died (SIGKILL, its node lost)
        repo.refresh_instance_nodes(session=s, instance="kvpilot-a", nodes=["n0"], now=clock.now())
        repo.transition_drain(session=s, action_id=a, to=DrainState.EXECUTING, actor="kvpilot",
                              now=clock.now(), message="executing on kvpilot-a")  # fmt: skip
    two = _sharded("kvpilot-b", s2, clock, runs, release)
    await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)  # one still reads live: left to it
    assert (runs, _state(s2, a)) == ([], "executing")
    clock.advance(60.0)  # one's node set not refreshed for longer than stale_after_s: gone
    await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)
    # before: left executing for good (requeued only at a process's first pass)
    assert (runs, _state(s2, a)) == (["kvpilot-b"], "done")
    with transaction(s2) as s:
        messages = [e.message for e in repo.list_drain_events(session=s, action_id=a)]
    assert "found executing on kvpilot-a, which no longer refreshes its nodes; resumed" in messages


async def test_a_leader_that_led_before_resumes_a_drain_the_other_left_executing(pools: Pools) -> None:
    s1, s2 = pools
    clock = VirtualClock(1000.0)
    runs: list[str] = []
    release = threading.Event()
    release.set()
    b = Actuation(sessions=s2, clock=clock, rails=DrainRails(dry_run=False),
                  drainer=_Drainer("b", runs, release), poll_s=0.05)  # fmt: skip
    await asyncio.wait_for(b.execute_approved(asyncio.Event()), 60)  # b led first: its first pass, nothing to do
    a = _approved_drain(s1, clock)  # b lost the Lease; a led, claimed this drain and died mid-drain
    with transaction(s1) as s:
        repo.transition_drain(session=s, action_id=a, to=DrainState.EXECUTING, actor="kvpilot",
                              now=clock.now(), message="executing")  # fmt: skip
    await asyncio.wait_for(b.execute_approved(asyncio.Event()), 60)  # b leads again
    # before: executing for good, the drains.max_concurrent slot held until a restart
    assert (runs, _state(s2, a)) == (["b"], "done")


async def test_a_live_instance_of_a_long_identity_keeps_its_drain(pools: Pools) -> None:
    # ha.identity takes any text; the store clips an instance's name to 253 characters. The claim named it whole, so
    # another instance never saw that name refresh: gone after stale_after_s, its drain resumed and run by both while
    # it still ran (session 25, A's review of f6650e2 and 6701340)
    s1, s2 = pools
    clock = VirtualClock(1000.0)
    a = _approved_drain(s1, clock)
    runs: list[str] = []
    release = threading.Event()
    release.set()
    one = _sharded("kvpilot-" + "a" * 300, s1, clock, runs, release)
    two = _sharded("kvpilot-b", s2, clock, runs, release)
    assert one._claim(a) is not None  # one runs n0's drain throughout
    for _ in range(24):  # two minutes of passes, 5 s apart
        one._fleet_nodes({"n0"}, clock.now(), read=False)  # its heartbeat, as its ticks store it
        await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)
        assert (runs, _state(s2, a)) == ([], "executing")  # before: ['kvpilot-b'] once 45 s had passed
        clock.advance(5.0)
