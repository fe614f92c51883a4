"""A long rolling update while the planner holds the current count (capacity unknown, within tolerance, the
scale-down window): the count read back is what kvpilot published, the planner's count plus the surge, and the
surge must be added once to a base that excludes it, not again every tick (`kvpilot demo --rollout-at 10` went
2 → 4 → … → 28 in a minute). The service is real; the planner holds whatever count it is told, as the policy's
hold does, and the scale source reads back the count published, as KEDA applies it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.scale_view import ScaleView
from scaler.decision import Decision
from scaler.rollout import DeploymentRollout
from tests.unit.kvpilot.fleet_double import START, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_rollout import COLD_TICKS, KEY, RollingFleet, published
from tests.unit.kvpilot.runtime.test_loop_scale import ContractPlanner

# kubectl set image, a wave of one loading (maxSurge 0, maxUnavailable 1): 3 old pods left, one new loading.
ROLLING = DeploymentRollout(
    generation=2,
    observed_generation=2,
    replicas=4,
    updated_replicas=1,
    status_replicas=4,
    ready_replicas=3,
    max_surge=0,
    max_unavailable=1,
)


@dataclass
class HoldingPlanner(ContractPlanner):
    """Keeps the count it is told (without a scale source, the replicas it sees: scaler.planner.replica_count), as
    `ReplicaPolicy._hold` does while capacity per replica is unknown."""

    def decide(self, state: Any, now: float, **kw: Any) -> list[Decision]:
        views = state.deployments()
        out = []
        for d in super().decide(state, now, **kw):
            n = (
                d.current_replicas
                if d.deployment in (kw.get("current_replicas") or {})
                else len(views[d.deployment].replicas)
            )
            out.append(dataclasses.replace(d, current_replicas=n, desired_replicas=n, reason="no_capacity"))
        return out


@dataclass
class AppliedScale:
    """spec.replicas as KEDA leaves it: the count kvpilot published last (4 before any), and the rollout status."""

    published: Callable[[], int | None]
    rollout: DeploymentRollout | None = None

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        count = self.published()
        rollouts = {KEY: self.rollout} if self.rollout is not None else {}
        return ScaleView(replicas={KEY: 4 if count is None else count}, rollouts=rollouts)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


async def test_a_hold_during_a_long_rollout_keeps_the_base_plus_the_surge_not_growing(db: str) -> None:
    clock = VirtualClock(START)
    fleet: Any = RollingFleet(clock)
    service: Any = None

    def last() -> int | None:
        board = service.loop.board.latest(KEY) if service is not None else None
        return None if board is None else int(board.decision.desired_replicas)

    scale = AppliedScale(last)
    service, restored, timer = make_service(db, clock, fleet, planner=HoldingPlanner(), scale=scale)
    await service.start(restored)
    await run_ticks(service, timer, 3)
    assert published(service) == 4
    scale.rollout = ROLLING
    seen = []
    for _ in range(30):  # 150 s: the rollout outlasts a cold start, the planner holding throughout
        await run_ticks(service, timer, 1)
        seen.append(published(service))
    # 4 + the wave loading and the next (waves of 1): 6 from the first tick of the rollout to the last
    assert set(seen) == {6}
    assert service.loop.board.latest(KEY).decision.current_replicas == 6  # the count as read, surge included
    # done: the surge covers the last wave's successors loading for at most a cold start, then it is withdrawn and
    # the planner's own count is published again
    scale.rollout = None
    await run_ticks(service, timer, COLD_TICKS + 2)
    assert published(service) == 4
    await run_ticks(service, timer, 3)
    assert published(service) == 4
    service.stop.set()
    await service.wait()
