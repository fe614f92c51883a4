"""kvpilot's own raise (``scaler.own_raise``: a rollout's surge on top of the planner's count) is remembered on the
planner's step-free time. On wall time a step ahead of the clock (NTP) during a rollout aged the memory past its
600 s at once: the count read back, surge included, was taken for the planner's own, a hold kept it and the stage
added the surge again (6 -> 8); a step back kept a withdrawn raise an hour past its 600 s. The rollout stage's own
timers (``scaler.rollout_stage``, ``scaler.rollout``) run on the same time: on wall time a step back held a finished
rollout's surge for the hour, a step ahead withdrew it while the last wave still loaded."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clocks import SteppingClock
from tests.unit.kvpilot.fleet_double import START, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_rollout import COLD_TICKS, KEY, RollingFleet, published
from tests.unit.kvpilot.runtime.test_loop_rollout_hold import ROLLING, AppliedScale, HoldingPlanner


def _stepping_service(db: str, step_s: float, step_at_tick: int) -> tuple[Any, Any, Any, AppliedScale, SteppingClock]:
    """A service over a rolling fleet whose wall clock steps by ``step_s`` after tick ``step_at_tick`` (between the
    tick's start and its sleep); the scale source reads back what the loop published."""
    clock = SteppingClock(START)
    fleet: Any = RollingFleet(clock)
    service: Any = None

    def last() -> int | None:
        board = service.loop.board.latest(KEY) if service is not None else None
        return None if board is None else int(board.decision.desired_replicas)

    scale = AppliedScale(last)
    service, restored, timer = make_service(db, clock, fleet, planner=HoldingPlanner(), scale=scale)
    tick = service.loop.tick

    async def stepping_tick():  # type: ignore[no-untyped-def]
        snap = await tick()
        if service.loop.tick_count == step_at_tick:
            clock.step(step_s)
        return snap

    service.loop.tick = stepping_tick
    return service, restored, timer, scale, clock


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_during_a_rollout_adds_the_surge_once(tmp_path: Path, step_s: float) -> None:
    service, restored, timer, scale, _ = _stepping_service(f"sqlite:///{tmp_path / 'kv.db'}", step_s, 8)
    await service.start(restored)
    try:
        await run_ticks(service, timer, 3)
        scale.rollout = ROLLING
        seen = []
        for _ in range(12):
            await run_ticks(service, timer, 1)
            seen.append(published(service))
        assert set(seen) == {6}  # 4 + the surge, through the step
    finally:
        service.stop.set()
        await service.wait()


# The last wave: every pod on the new template, one still loading (a successor slow to become ready).
LAST_WAVE = dataclasses.replace(ROLLING, updated_replicas=4)


async def _last_wave_published(db: str, step_s: float) -> list[int]:
    """What the loop publishes, tick by tick, through a rollout whose last wave's successor stays loading, the wall
    clock stepped by ``step_s`` as the last old pod goes."""
    service, restored, timer, scale, clock = _stepping_service(db, step_s, 7)
    await service.start(restored)
    try:
        await run_ticks(service, timer, 3)
        scale.rollout = ROLLING
        seen = []
        for _ in range(4):
            await run_ticks(service, timer, 1)
            seen.append(published(service))
        assert clock.stepped == step_s
        scale.rollout = LAST_WAVE
        for _ in range(COLD_TICKS + 6):
            await run_ticks(service, timer, 1)
            seen.append(published(service))
        return seen
    finally:
        service.stop.set()
        await service.wait()


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_as_the_last_wave_loads_keeps_the_surge_a_cold_start(tmp_path: Path, step_s: float) -> None:
    """The stage's timers run on the loop's step-free time: the last wave's surge covers its successor loading for a
    cold start after the last old pod was seen, through a step of the wall clock. On wall time a step back held it
    for the hour (the time since the old pod read negative), a step ahead withdrew it at the step."""
    unstepped = await _last_wave_published(f"sqlite:///{tmp_path / 'a.db'}", 0.0)
    # the surge through the rollout and for a cold start (120 s) after the last old pod was seen, then the
    # planner's own count
    assert unstepped == [6] * (4 + COLD_TICKS) + [4] * 6
    assert await _last_wave_published(f"sqlite:///{tmp_path / 'b.db'}", step_s) == unstepped
