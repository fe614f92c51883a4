"""The control loop keeps its interval when the wall clock steps (NTP) while a tick runs: the tick is timed on the
clock's monotonic reading, not on its wall time. Before, a step back of an hour during a tick made the loop sleep
interval + 3600 s: no tick, no decision, no scrape for the hour, while /healthz stayed 200."""

from __future__ import annotations

import asyncio

import pytest

from collector.clock import VirtualClock
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks


class SteppingClock(VirtualClock):
    """A virtual wall clock that can also be stepped (either way) the way NTP steps one; its monotonic reading
    never steps."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.stepped = 0.0

    def step(self, seconds: float) -> None:
        self._now += seconds
        self.stepped += seconds

    def monotonic(self) -> float:
        return self._now - self.stepped


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_during_a_tick_keeps_the_interval(tmp_path, step_s: float) -> None:
    clock = SteppingClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'kv.db'}", clock, ScriptedFleet(clock))
    asked: list[float] = []
    timer_sleep = service._sleep

    async def sleep(seconds: float) -> None:
        current = asyncio.current_task()
        if current is not None and current.get_name() == "control-loop":
            asked.append(seconds)
            seconds = min(seconds, service.interval_s)  # the test goes on either way; `asked` tells
        await timer_sleep(seconds)

    service._sleep = sleep
    tick = service.loop.tick

    async def stepping_tick():  # type: ignore[no-untyped-def]
        snap = await tick()
        if service.loop.tick_count == 3:
            clock.step(step_s)  # NTP steps the wall clock while tick 3 runs
        return snap

    service.loop.tick = stepping_tick  # type: ignore[method-assign]
    await service.start(restored)
    await run_ticks(service, timer, 5)
    service.stop.set()
    await service.wait()
    assert len(asked) >= 5
    assert asked[:5] == [service.interval_s] * 5  # the ticks take no virtual time: each sleep is the interval
