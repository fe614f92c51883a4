"""A rolling update without a scale source (static or PromQL discovery): the planner counts the replicas the
collector sees, and once the surge's pods serve they are among them. A hold (capacity unknown, within tolerance,
the scale-down window) must not keep them as the planner's own count, or the stage adds the surge on top of them
again each time a surge's pods come up, and the hold keeps them after the rollout. The service is real; the
planner holds the count it sees, as the policy's hold does; the fleet runs the replicas the test rolls plus one
for each replica published above them, serving a few ticks after it was asked for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from tests.unit.kvpilot.fleet_double import ENGINE, START, make_service, run_ticks, serving_sample
from tests.unit.kvpilot.runtime.test_loop_rollout import COLD_TICKS, published
from tests.unit.kvpilot.runtime.test_loop_rollout_hold import HoldingPlanner

SURGE_TICKS = 4  # a surge pod serves 20 s after it is asked for (the loop's cold start, 120 s, is longer)


@dataclass
class FollowingFleet:
    """The pods the test rolls (pod, version), and the surge's: one more pod of the newest version for each replica
    published above the rolled ones, serving ``SURGE_TICKS`` ticks after it was first asked for."""

    clock: VirtualClock
    published: Callable[[], int | None]
    rolled: list[tuple[str, str]] = field(default_factory=lambda: [(f"chat-{i}", "v1") for i in range(4)])
    asked_at: list[float] = field(default_factory=list)  # when each surge pod was asked for
    made: int = 0

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        extra = max((self.published() or 0) - len(self.rolled), 0)
        self.asked_at = self.asked_at[:extra] + [t] * max(extra - len(self.asked_at), 0)
        newest = max(version for _, version in self.rolled)
        serving = [(f"chat-surge-{i}", newest) for i, at in enumerate(self.asked_at) if t - at >= 5 * SURGE_TICKS]
        samples = tuple(serving_sample(pod, "n0", t, model=model) for pod, model in self.rolled + serving)
        return CollectResult(
            timestamp=t, results=(ScrapeResult(ENGINE, True, t, 0.01, replicas=samples, engine="vllm"),)
        )


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


async def test_a_hold_without_a_scale_source_does_not_add_the_surge_again_once_its_pods_serve(db: str) -> None:
    clock = VirtualClock(START)
    service: Any = None

    def last() -> int | None:
        board = service.loop.board.latest("llm/chat") if service is not None else None
        return None if board is None else int(board.decision.desired_replicas)

    fleet = FollowingFleet(clock, last)
    service, restored, timer = make_service(db, clock, fleet, planner=HoldingPlanner())
    await service.start(restored)
    await run_ticks(service, timer, 3)
    assert published(service) == 4
    seen: list[int] = []
    # A rolling update replacing pods in place (a StatefulSet's, a LeaderWorkerSet's: each pod keeps its name and
    # comes back on the new version), a wave every 60 s; the surge's pods serve 20 s after they are asked for.
    for wave in range(4):
        fleet.rolled[wave] = (f"chat-{wave}", "v2")
        for _ in range(12):
            await run_ticks(service, timer, 1)
            seen.append(published(service))
    # 4 + the next wave's replica, added once: the surge pod serving is not the planner's (on f3f4b9b: 5, 6, ...,
    # 12, one more each time a surge pod came up, and 11 kept after the rollout)
    assert set(seen[:36]) == {5}, seen
    # every pod on v2 from the last wave on: the surge is withdrawn, and the hold does not keep the surge's pod
    # as its own, then or once its memory of the raise has lapsed
    for _ in range(COLD_TICKS):
        await run_ticks(service, timer, 1)
        seen.append(published(service))
    assert set(seen[36:]) == {4}, seen
    service.stop.set()
    await service.wait()
