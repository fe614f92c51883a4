"""The live-drain map (kvpilot_node_drain_state, actuation's draining nodes) holds every live action however long the
history of finished ones: it read the newest 1,000 actions of every state and kept the live ones, so a live action
older than 1,000 finished ones was never seen (046c975 reads the live states alone)."""

from __future__ import annotations

from collector.clock import VirtualClock
from store import repo
from store.db import transaction
from store.models import DrainActionRow
from tests.unit.kvpilot.fleet_double import (
    START,
    ScriptedFleet,
    make_service,
    run_ticks,
    snapshot_after_a_fresh_actuator_pass,
)


async def test_a_live_drain_behind_a_long_history_reaches_the_snapshot(tmp_path) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, replicas=(("chat-0", "n0"), ("chat-1", "n1")))  # nothing flagged: no new drains
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, fleet)
    with transaction(service.sessions) as s:
        repo.request_drain(session=s, node="n1", requested_by="op", now=START - 3600, dry_run=True)
        s.add_all(
            DrainActionRow(node=f"gone-{i}", state="cancelled", dry_run=True, requested_by="op",
                           requested_at=START - 60, updated_at=START - 60)
            for i in range(1_001)
        )  # fmt: skip
    await service.start(restored)
    await run_ticks(service, timer, 2)
    await snapshot_after_a_fresh_actuator_pass(service, timer)
    assert service.snapshot().node_drains == {"n1": "requested"}
    service.stop.set()
    await service.wait()
