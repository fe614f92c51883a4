"""A sharded instance's liveness, for a drain it claimed, is judged by local observation, as client-go's leader
election judges a Lease (``observedTime``): its stored refresh seen to change within ``stale_after_s`` of the
reader's monotonic clock (``kvpilot.actuation.heartbeats.Heartbeats``), never its wall time against the reader's.

Before (f6650e2), a reader compared the claimer's ``refreshed_at`` with its own wall clock: a step of more than
``stale_after_s`` ahead on the reader made a live instance look gone and its drain was resumed while it still ran
(the node drained by both); a step back on the reader, or ahead on a writer that then died, kept a gone instance's
drain executing for the hour; a writer stepped back stopped refreshing (its cadence was on its wall clock) and
looked gone. The breaker's read deleted a live instance's row on a reader stepped ahead. Each side is stepped
forward and back on fake clocks; SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from unittest.mock import patch

import pytest
from sqlalchemy import select

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails, Placement
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, FleetShare
from kvpilot.actuation.drain import DrainResult
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import transaction
from store.drain_states import DrainState
from store.models import InstanceNodesRow
from tests.helpers.drains import Pools

START = 1000.0
HOUR_S = 3600.0
EVERY_S = 5.0  # a pass of each instance
LEASE_S = 15.0


class HostClock:
    """One host's clock: wall time ``base`` plus the steps made on it, monotonic time ``base``'s."""

    def __init__(self, base: VirtualClock) -> None:
        self.base, self.stepped = base, 0.0

    def now(self) -> float:
        return self.base.now() + self.stepped

    def monotonic(self) -> float:
        return self.base.now()


class _Drainer:
    def __init__(self, runs: list[str]) -> None:
        self.runs = runs

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        interrupt: threading.Event | None = None,
        **_: object,
    ) -> DrainResult:
        self.runs.append(node)
        return DrainResult(node, False, evicted=["ml/chat-0"])

    def cordoned(self) -> set[str] | None:
        return set()


def _instance(sessions, clock: HostClock, name: str, runs: list[str]) -> Actuation:  # type: ignore[no-untyped-def]
    share = FleetShare(name, stale_after_s=3 * LEASE_S, refresh_every_s=LEASE_S)
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=_Drainer(runs),
                     poll_s=0.05, fleet=share)  # fmt: skip


def _tick(act: Actuation, nodes: list[str], flagged: list[str] = ()) -> None:  # type: ignore[assignment]
    """One tick's requests of an instance holding ``nodes``: its node set refreshed when due (its heartbeat)."""
    placements = [Placement("team/llm", f"llm-{n}", n, True) for n in nodes]
    now = act._clock.now()
    findings = [Finding("stuck_gpu", Severity.CRITICAL, Subject(node=n, gpu="GPU-1"), now - 30, f"XID 79 on {n}",
                        action="drain_node") for n in flagged]  # fmt: skip
    with patch("kvpilot.actuation.recheck.placements", return_value=placements):
        act._request_drains(Snapshot(tick=1, t=now, findings=findings))


def _claimed_by_a(sessions, clock: HostClock) -> int:  # type: ignore[no-untyped-def]
    """A drain of n0 that instance a claimed (it runs it, or died running it)."""
    with transaction(sessions) as s:
        a = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=clock.now(), dry_run=False).id
        repo.approve_drain(session=s, action_id=a, actor="kvpilot", now=clock.now(), max_concurrent=1)
        repo.transition_drain(session=s, action_id=a, to=DrainState.EXECUTING, actor="kvpilot", now=clock.now(),
                              message="executing on kvpilot-a")  # fmt: skip
    return a


def _state(sessions, action: int) -> str:  # type: ignore[no-untyped-def]
    with transaction(sessions) as s:
        return repo.get_drain(session=s, action_id=action).state


# side stepped, its steps (seconds into the run, how far): forward then back on the reader (ahead: the live writer
# looked gone); back then forward on the writer (behind: its refreshes stopped, on its wall clock's cadence)
STEPS = {"reader": ((10.0, HOUR_S), (50.0, -2 * HOUR_S)), "writer": ((10.0, -HOUR_S), (70.0, 2 * HOUR_S))}


@pytest.mark.parametrize("side", ["reader", "writer"])
async def test_a_live_instances_drain_is_left_to_it_whatever_either_wall_clock_does(pools: Pools, side: str) -> None:
    s1, s2 = pools
    base = VirtualClock(START)
    clocks = {"writer": HostClock(base), "reader": HostClock(base)}
    runs: list[str] = []
    one = _instance(s1, clocks["writer"], "kvpilot-a", runs)
    two = _instance(s2, clocks["reader"], "kvpilot-b", runs)
    action = _claimed_by_a(s1, clocks["writer"])
    steps = list(STEPS[side])
    for _ in range(int(120 / EVERY_S)):  # two minutes of passes, one live and running its drain throughout
        _tick(one, ["n0"])
        _tick(two, ["n1"], flagged=["n1"])  # the breaker reads the fleet's sets: a's row must stay
        await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)
        # before: the reader ahead, or the writer behind, resumed a's drain and ran it too: runs ['n0']
        assert (runs, _state(s2, action)) == ([], "executing")
        with transaction(s2, reads_only=True) as s:
            assert "kvpilot-a" in set(s.scalars(select(InstanceNodesRow.instance)))
        base.advance(EVERY_S)
        if steps and base.now() - START >= steps[0][0]:
            clocks[side].stepped += steps.pop(0)[1]
    assert not steps


# the dead writer's last refresh stamped an hour ahead; or the reader an hour behind
DEAD = {"writer": HOUR_S, "reader": -HOUR_S}


@pytest.mark.parametrize("side", ["reader", "writer"])
async def test_a_gone_instances_drain_is_resumed_within_the_window_whatever_either_wall_clock_does(
    pools: Pools, side: str
) -> None:
    s1, s2 = pools
    base = VirtualClock(START)
    clocks = {"writer": HostClock(base), "reader": HostClock(base)}
    clocks[side].stepped = DEAD[side]
    runs: list[str] = []
    one = _instance(s1, clocks["writer"], "kvpilot-a", runs)
    two = _instance(s2, clocks["reader"], "kvpilot-b", runs)
    action = _claimed_by_a(s1, clocks["writer"])
    _tick(one, ["n0"])  # a's last refresh: then it dies (SIGKILL, its node lost)
    passes = 0
    while not runs and passes < int(120 / EVERY_S):
        await asyncio.wait_for(two.execute_approved(asyncio.Event()), 60)
        base.advance(EVERY_S)
        passes += 1
    # before: a looked live for the hour, its drain executing and its drains.max_concurrent slot held
    assert (runs, _state(s2, action)) == (["n0"], "done")
    assert base.now() - START <= 3 * LEASE_S + 2 * EVERY_S  # within stale_after_s of b's first sight of it
    with transaction(s2) as s:
        messages = [e.message for e in repo.list_drain_events(session=s, action_id=action)]
    assert "found executing on kvpilot-a, which no longer refreshes its nodes; resumed" in messages


async def test_a_gone_instances_row_is_deleted_once_watched_unchanged_for_the_window(pools: Pools) -> None:
    s1, s2 = pools
    base = VirtualClock(START)
    writer, reader = HostClock(base), HostClock(base)
    writer.stepped = HOUR_S  # its last refresh stamped an hour ahead: not a reason to keep its row
    one, two = _instance(s1, writer, "kvpilot-a", []), _instance(s2, reader, "kvpilot-b", [])
    _tick(one, ["n0"])

    def rows() -> list[str]:
        with transaction(s2, reads_only=True) as s:
            return sorted(s.scalars(select(InstanceNodesRow.instance)))

    _tick(two, ["n1"], flagged=["n1"])
    assert rows() == ["kvpilot-a", "kvpilot-b"]  # seen for the first time: counts from this read
    base.advance(3 * LEASE_S - 1)
    _tick(two, ["n1"], flagged=["n1"])
    assert rows() == ["kvpilot-a", "kvpilot-b"]
    base.advance(1)
    _tick(two, ["n1"], flagged=["n1"])
    assert rows() == ["kvpilot-b"]
