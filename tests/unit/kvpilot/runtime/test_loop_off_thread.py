"""The tick's CPU-heavy stages run off the event loop (issue 17): while the planner works for a long while, the
loop keeps running other coroutines (the HTTP API, KEDA's gRPC), and the tick still waits for the decision."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collector.clock import VirtualClock
from collector.state import FleetState
from scaler.decision import Decision
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

GATE_S = 10.0  # the longest a decide spins; on the loop, that long with no heartbeat


@dataclass(frozen=True)
class Deciding:
    """The decide in progress: when it began, and the gate that ends its spin."""

    started: float
    gate: threading.Event = field(default_factory=threading.Event)


class BusyPlanner:
    """Spends CPU in every decide (a planner on a very large fleet) until the test opens that decide's gate (or
    GATE_S passes), and notes when it ran. Pure Python: it holds the GIL but for the interpreter's switches. The
    test opens the gate only once the heartbeats it counts came *while* the decide spun, so no machine is too slow
    or too fast for it: off the loop they come and the gate opens at once; on the loop none could, and the spin
    ends at GATE_S with none."""

    def __init__(self) -> None:
        self.ran: list[tuple[float, float]] = []
        self.deciding: Deciding | None = None

    def forget(self, key: str) -> None:
        pass  # keeps nothing per deployment

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        deciding = Deciding(time.perf_counter())  # a gate of its own: a late heartbeat opens only an old one
        self.deciding = deciding
        while not deciding.gate.is_set() and time.perf_counter() - deciding.started < GATE_S:
            sum(i * i for i in range(1000))
        self.deciding = None
        self.ran.append((deciding.started, time.perf_counter()))
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
            deciding = planner.deciding
            if deciding is not None and sum(b > deciding.started for b in beats) >= 6:  # (one more than asserted)
                deciding.gate.set()
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
        # On the loop, the spinning decide would let no beat through until GATE_S; in a worker thread the loop gets
        # the GIL back at every switch interval, so beats keep coming and open the gate.
        assert len(during) >= 5, f"only {len(during)} heartbeats during a {end - start:.2f} s decide"
