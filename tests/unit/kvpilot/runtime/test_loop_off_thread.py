"""The tick's CPU-heavy stages run off the event loop (issue 17): while the planner works for a long while, the
loop keeps running other coroutines (the HTTP API, KEDA's gRPC), and the tick still waits for the decision."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from collector.clock import VirtualClock
from collector.state import FleetState
from scaler.decision import Decision
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

BUSY_S = 0.3


class BusyPlanner:
    """Spends BUSY_S of CPU in every decide (a planner on a very large fleet) and notes when it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[float, float]] = []

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        start = time.perf_counter()
        while time.perf_counter() - start < BUSY_S:
            sum(i * i for i in range(1000))  # pure Python: holds the GIL but for the interpreter's switches
        self.ran.append((start, time.perf_counter()))
        return []


async def test_the_loop_keeps_answering_while_the_planner_works(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    planner = BusyPlanner()
    service, restored, timer = make_service(
        f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock), planner=planner
    )
    beats: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:  # what an API request needs: a turn of the event loop now and then
        while not stop.is_set():
            beats.append(time.perf_counter())
            await asyncio.sleep(0.005)

    beating = asyncio.create_task(heartbeat())
    await service.start(restored)
    try:
        await run_ticks(service, timer, 1)
    finally:
        stop.set()
        await beating
        service.stop.set()
        await service.wait()
    assert planner.ran
    for start, end in planner.ran:
        during = [b for b in beats if start < b < end]
        # On the loop, a 0.3 s decide would let no beat through; in a worker thread the loop gets the GIL back
        # at every switch interval (5 ms), so beats keep coming however loaded the machine.
        assert len(during) >= 5, f"only {len(during)} heartbeats during a {end - start:.2f} s decide"
