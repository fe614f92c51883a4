"""A restart (or a fresh HA replica taking over) in the middle of a rolling update: the count the scale source
reads back is what the old instance published, the planner's count plus the surge. The new instance knows nothing
of that surge from memory; it must not read it as the planner's own count, or a hold (capacity unknown, within
tolerance, the scale-down window) keeps it and the rollout stage adds the surge once more. The services are real,
store included; the planner holds whatever count it is told, and the scale source reads back the count published,
as KEDA applies it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from tests.unit.kvpilot.fleet_double import START, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_rollout import COLD_TICKS, KEY, RollingFleet, published
from tests.unit.kvpilot.runtime.test_loop_rollout_hold import ROLLING, AppliedScale, HoldingPlanner


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


class Running:
    """The instance running now, whose board the scale source reads back, and its virtual timer."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.clock = VirtualClock(START)
        self.fleet: Any = RollingFleet(self.clock)
        self.scale = AppliedScale(self.last)
        self.service: Any = None
        self.timer: Any = None

    def last(self) -> int | None:
        board = self.service.loop.board.latest(KEY) if self.service is not None else None
        return None if board is None else int(board.decision.desired_replicas)

    async def start(self) -> int | None:
        """A new instance on the same store (a restart; a new HA replica starts the same way): the count of the
        decision it resumes, which it publishes at once."""
        self.service, restored, self.timer = make_service(
            self.db, self.clock, self.fleet, planner=HoldingPlanner(), scale=self.scale
        )
        await self.service.start(restored)
        stored = restored.decisions.get(KEY)
        return None if stored is None else stored.desired_replicas

    async def ticks(self, n: int) -> list[int]:
        """What the instance publishes at each of its next ``n`` ticks."""
        out = []
        for _ in range(n):
            await run_ticks(self.service, self.timer, 1)
            out.append(published(self.service))
        return out

    async def stop(self) -> None:
        self.service.stop.set()
        await self.service.wait()


@pytest.mark.parametrize("ticks_before", [1, 6])
async def test_an_instance_started_mid_rollout_publishes_what_the_old_one_did(db: str, ticks_before: int) -> None:
    running = Running(db)
    assert await running.start() is None
    assert (await running.ticks(3))[-1] == 4
    running.scale.rollout = ROLLING
    assert (await running.ticks(ticks_before))[-1] == 6  # 4 + the wave loading and the next
    await running.stop()
    # the stored decision, surge included, is published at once and read back as the count; the planner holds
    # what it is told
    assert await running.start() == 6
    seen = await running.ticks(12)  # a minute of the rollout, the planner holding
    assert set(seen) == {6}, seen  # not 8: the surge is added once, to the planner's 4 (8 on f3f4b9b)
    running.scale.rollout = None
    # done: the planner's own count again (6 on f3f4b9b: the hold kept the surge)
    assert (await running.ticks(COLD_TICKS + 2))[-1] == 4
    await running.stop()


async def test_a_restart_after_the_rollout_keeps_the_planners_count(db: str) -> None:
    """The surge withdrawn before the restart: nothing of it is subtracted from a count that no longer carries it."""
    running = Running(db)
    await running.start()
    await running.ticks(2)
    running.scale.rollout = ROLLING
    assert max(await running.ticks(4)) == 6
    running.scale.rollout = None
    assert (await running.ticks(COLD_TICKS + 4))[-1] == 4
    await running.stop()
    assert await running.start() == 4
    assert set(await running.ticks(4)) == {4}
    await running.stop()
