"""The control loop keeps its interval when the wall clock steps (NTP) while a tick runs: the tick is timed on the
clock's monotonic reading, not on its wall time. Before, a step back of an hour during a tick made the loop sleep
interval + 3600 s: no tick, no decision, no scrape for the hour, while /healthz stayed 200."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.helpers.clocks import SteppingClock
from tests.helpers.sqlite_store import migrated
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_service_own_store import Held


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


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_neither_hastens_nor_delays_the_split_warning(tmp_path, caplog, step_s: float) -> None:
    # A replica on its own SQLite warns once it has followed another holder for 60 s (4 lease periods). That time ran
    # on the wall clock: a step ahead warned at the next tick ("held the Lease for 3605 s"), a step back an hour late.
    caplog.set_level(logging.WARNING, logger="kvpilot.runtime.service")
    clock = SteppingClock(START)
    held = Held(leader=False, holder_seen="kvpilot-7d9f-0")
    service, restored, timer = make_service(migrated(tmp_path / "kv.db"), clock, ScriptedFleet(clock), leadership=held)
    tick = service.loop.tick

    async def stepping_tick():  # type: ignore[no-untyped-def]
        snap = await tick()
        if service.loop.tick_count == 2:
            clock.step(step_s)  # between the tick's start and its sleep
        return snap

    service.loop.tick = stepping_tick  # type: ignore[method-assign]
    await service.start(restored)
    try:
        await run_ticks(service, timer, 11)  # 55 s of following
        assert not _said(caplog)
        await run_ticks(service, timer, 20)
        (warning,) = _said(caplog)
        assert "another replica (kvpilot-7d9f-0) has held the Lease for 60 s" in warning
    finally:
        service.stop.set()
        await service.wait()


def _said(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.getMessage() for r in caplog.records if r.name == "kvpilot.runtime.service"]
