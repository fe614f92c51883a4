"""With sharding the drain circuit breaker counts the live instances' node sets (``FleetShare``); which instances are
live is read by local observation (``Heartbeats``: a stored refresh seen to change on the reader's monotonic clock),
not by comparing another host's wall-clock stamp with the reader's.

Before, the count kept only the rows whose ``refreshed_at`` was within ``stale_after_s`` of the reader's wall clock:
a reader stepped ahead by more than that (45 s here), or writers stepped back (or running that far behind), left the
other instances' nodes and flags out of every count for as long as the step lasted, and the breaker decided on the
reader's own shard alone, the share 1cbdd64 replaced: here 2 flagged of its 5 nodes, a drain requested, where the
fleet's 5 of 15 refuses it. SQLite and a real PostgreSQL."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails, Placement
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, FleetShare, NoClusterDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import transaction
from tests.helpers.drains import Pools
from tests.unit.kvpilot.actuation.test_drain_orphans_clock_steps import HOUR_S, HostClock

START = 1_700_000_000.0
EVERY_S = 5.0  # a pass of each instance
LEASE_S = 15.0


def _stuck(node: str, at: float) -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="GPU-1"), at - 30, f"XID 79 on {node}",
                   action="drain_node")  # fmt: skip


def _instance(sessions: sessionmaker[Session], clock: HostClock, name: str, refusals: list[str]) -> Actuation:
    share = FleetShare(name, stale_after_s=3 * LEASE_S, refresh_every_s=LEASE_S)
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock),
                     on_refusal=lambda node, rail: refusals.append(f"{node} {rail}"), fleet=share)  # fmt: skip


def _pass(act: Actuation, nodes: list[str], flagged: list[str]) -> None:
    """One pass of an instance holding a ready replica on each of ``nodes``, its findings flagging ``flagged``."""
    placements = [Placement("team/llm", f"llm-{n}", n, True) for n in nodes]
    now = act._clock.now()
    with patch("kvpilot.actuation.recheck.placements", return_value=placements):
        act._request_drains(Snapshot(tick=1, t=now, findings=[_stuck(n, now) for n in flagged]))


def _requested(sessions: sessionmaker[Session]) -> list[str]:
    with transaction(sessions, reads_only=True) as s:
        return sorted(r.node for r in repo.list_drains(session=s).items)


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


# who is stepped, when (seconds into the run) and how far: the reader ahead an hour then behind one; the two writers
# back an hour then ahead one; the two writers 60 s behind from the start (skew beyond stale_after_s), a's first
# flag 20 s in (a start's first read has nothing seen yet: it places a row by its stamp, as before)
CASES = {
    "reader stepped": ("reader", ((10.0, HOUR_S), (70.0, -2 * HOUR_S)), 0.0),
    "writers stepped": ("writers", ((10.0, -HOUR_S), (70.0, 2 * HOUR_S)), 0.0),
    "writers skewed": ("writers", ((0.0, -60.0),), 20.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_breaker_counts_the_fleet_whatever_the_wall_clocks_do(pools: Pools, case: str) -> None:
    side, steps_, flag_from = CASES[case]
    steps = list(steps_)
    s1, s2 = pools
    base = VirtualClock(START)
    reader, writers = HostClock(base), HostClock(base)
    refusals: list[str] = []
    a = _instance(s2, reader, "kvpilot-a", refusals)
    b = _instance(s1, writers, "kvpilot-b", [])
    c = _instance(s1, writers, "kvpilot-c", [])
    # b and c: 5 nodes each, 3 flagged by their findings; a: 5 nodes, 2 flagged. Alone a's 2 of 5 is within
    # max(2, 0.2 x 5) and a0 is drained; the fleet's 5 of 15 is above max(2, 0.2 x 15) = 3: both refused.
    with transaction(s1) as s:
        repo.upsert_findings(session=s, active=[_stuck(n, START) for n in ("b0", "b1", "c0")], now=START,
                             closes=lambda *_: False)  # fmt: skip
    counted = 0
    for _ in range(int(120 / EVERY_S)):
        while steps and base.now() - START >= steps[0][0]:
            (reader if side == "reader" else writers).stepped += steps.pop(0)[1]
        _pass(b, _names("b", 5), [])
        _pass(c, _names("c", 5), [])
        refusals.clear()
        flagged = ["a0", "a1"] if base.now() - START >= flag_from else []
        _pass(a, _names("a", 5), flagged)
        if flagged:
            counted += 1
            # before: once the step (or the skew) put b's and c's stamps 45 s behind a's clock, a0 was requested
            at = f"{base.now() - START:g} s in, {side} stepped {reader.stepped or writers.stepped:+g} s"
            assert sorted(refusals) == ["a0 refused_circuit_breaker", "a1 refused_circuit_breaker"], at
            assert _requested(s2) == [], at
        base.advance(EVERY_S)
    assert not steps
    assert counted >= 20
