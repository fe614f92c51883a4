"""A drain the rails refuse every tick is logged once per node and rail, not once per tick, and every refusal is
counted (`kvpilot_drain_refusals_total`): 158 of 169 log lines were one refusal before."""

from __future__ import annotations

import logging

import pytest

from collector.clock import VirtualClock
from detectors.drain_rails import DrainDecision, Verdict
from kvpilot.actuation import RefusalLog
from store import repo
from store.db import transaction
from tests.helpers.clocks import SteppingClock
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, actuator_caught_up, make_service, run_ticks

LAST = DrainDecision("node-0", Verdict.REFUSED_LAST_READY_REPLICA, "node-0 holds the last ready replica", ("f",))
BREAKER = DrainDecision("node-0", Verdict.REFUSED_CIRCUIT_BREAKER, "3 of 4 nodes flagged (75 %)", ("f",))


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kvpilot.actuation"]


def test_once_per_node_and_rail_until_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.actuation")
    clock = VirtualClock(0.0)
    counted: list[tuple[str, str]] = []
    refusals = RefusalLog(clock, lambda node, rail: counted.append((node, rail)))
    for _ in range(158):  # the same refusal every 5 s tick: one line
        refusals.tick([LAST])
        clock.advance(5)
    refusals.tick([BREAKER])  # another rail refuses it: one line, with how long the first lasted
    clock.advance(5)
    refusals.tick([])  # the node is no longer refused (approved, or its finding closed): one line
    assert _lines(caplog) == [
        "drain of node-0 refused: node-0 holds the last ready replica (logged again only when this changes)",
        "drain of node-0 refused 158 times over 790 s (refused_last_ready_replica); now: 3 of 4 nodes flagged (75 %)",
        "drain of node-0 no longer refused (refused_circuit_breaker, 1 times over 5 s)",
    ]
    assert len(counted) == 159
    assert counted[0] == ("node-0", "refused_last_ready_replica")
    assert counted[-1] == ("node-0", "refused_circuit_breaker")


def test_how_long_a_refusal_lasted_leaves_out_a_step_of_the_clock(caplog: pytest.LogCaptureFixture) -> None:
    # NTP steps the wall clock an hour back while the refusal lasts: it lasted 60 s, not -3540 s
    caplog.set_level(logging.INFO, logger="kvpilot.actuation")
    clock = SteppingClock(START)
    refusals = RefusalLog(clock)
    for i in range(12):
        refusals.tick([LAST])
        clock.advance(5)
        if i == 5:
            clock.step(-3600.0)
    refusals.tick([])
    assert _lines(caplog)[-1] == "drain of node-0 no longer refused (refused_last_ready_replica, 12 times over 60 s)"


async def test_the_service_logs_the_last_ready_replica_refusal_once_and_counts_each(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.actuation")
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, xid=79)  # the only replica runs on the flagged node: refused every tick
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, fleet)
    await service.start(restored)
    labels = {"node": "n0", "reason": "refused_last_ready_replica"}

    def refusals() -> float:
        return service.metrics.registry.get_sample_value("kvpilot_drain_refusals_total", labels) or 0.0

    for _ in range(30):  # the actuator runs after each tick, apart from the loop (passes coalesce): one at a time
        await run_ticks(service, timer, 1)
        await actuator_caught_up(service)
        if refusals() >= 3:
            break
    assert refusals() >= 3
    service.stop.set()
    await service.wait()
    with transaction(service.sessions) as s:
        assert repo.list_drains(session=s).total == 0
    refused = [line for line in _lines(caplog) if "refused" in line]
    assert len(refused) == 1, refused  # logged once, though counted every tick
    assert refused[0].startswith("drain of n0 refused: ")
