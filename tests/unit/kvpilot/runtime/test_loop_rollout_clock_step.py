"""kvpilot's own raise (``scaler.own_raise``: a rollout's surge on top of the planner's count) is remembered on the
planner's step-free time. On wall time a step ahead of the clock (NTP) during a rollout aged the memory past its
600 s at once: the count read back, surge included, was taken for the planner's own, a hold kept it and the stage
added the surge again (6 -> 8); a step back kept a withdrawn raise an hour past its 600 s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clocks import SteppingClock
from tests.unit.kvpilot.fleet_double import START, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_rollout import KEY, RollingFleet, published
from tests.unit.kvpilot.runtime.test_loop_rollout_hold import ROLLING, AppliedScale, HoldingPlanner


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_during_a_rollout_adds_the_surge_once(tmp_path: Path, step_s: float) -> None:
    clock = SteppingClock(START)
    fleet: Any = RollingFleet(clock)
    service: Any = None

    def last() -> int | None:
        board = service.loop.board.latest(KEY) if service is not None else None
        return None if board is None else int(board.decision.desired_replicas)

    scale = AppliedScale(last)
    service, restored, timer = make_service(
        f"sqlite:///{tmp_path / 'kv.db'}", clock, fleet, planner=HoldingPlanner(), scale=scale
    )
    tick = service.loop.tick

    async def stepping_tick():  # type: ignore[no-untyped-def]
        snap = await tick()
        if service.loop.tick_count == 8:
            clock.step(step_s)  # between the tick's start and its sleep
        return snap

    service.loop.tick = stepping_tick
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
