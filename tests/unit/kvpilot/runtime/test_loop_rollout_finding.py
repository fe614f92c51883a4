"""The rollout finding through the live control loop reads a planner scale-down mid-rollout as the rollout stage
does: no wave, so no "replaces N of M at once" warning; a wave that really drains half the fleet still raises it.

Before 2026-12-06 the detector read the ready deficit against the most ready replicas within its 10-minute window
while the stage (since 85dc825) read it against the most ready since the count asked for last fell: a planner going
6 -> 3 in a rollout of waves of 1 opened "a rollout replaces 4 of 6 replicas at once (67%)". The service is real
(collector stage and discovery doubles aside: each pod listed serves its page, a pod removed leaves discovery at
once), with a planner that asks for a fixed count the test lowers, and, where the scale source counts the replicas,
a Deployment whose spec.replicas follows what kvpilot published (as KEDA applies it)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult, VirtualTimer
from kvpilot.runtime.scale_view import ScaleView
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from tests.unit.kvpilot.fleet_double import START, run_ticks, serving_sample, settings_for
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, ContractPlanner

COLD_TICKS = 24  # 120 s at 5 s ticks: the loop's default cold start for a planner without one


@dataclass
class Pods:
    """The deployment's serving pods (pod -> version): discovery lists them (a loading pod serves no page and is not
    listed yet), each serves its page."""

    clock: VirtualClock
    serving: dict[str, str] = field(default_factory=lambda: {f"chat-{i}": "v1" for i in range(6)})

    async def targets(self) -> list[TargetInfo]:
        return [
            TargetInfo(url=f"http://{pod}:8000/metrics", namespace="llm", deployment="chat", pod=pod, node="n0")
            for pod in sorted(self.serving)
        ]

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        results = tuple(
            ScrapeResult(
                target,
                True,
                t,
                0.01,
                engine="vllm",
                replicas=(serving_sample(pod, "n0", t, model=self.serving[pod]),),
            )
            for target in targets
            if (pod := target.pod or "") in self.serving
        )
        return CollectResult(timestamp=t, results=results)


@dataclass
class FollowedCount:
    """spec.replicas as KEDA leaves it: what kvpilot published last (``spec``, set by the test after each tick)."""

    spec: int = 6

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        return ScaleView(replicas={KEY: self.spec})


class Run:
    """The service over ``Pods``, one tick at a time; every rollout finding summary it held, and the counts it
    published."""

    def __init__(self, service: Any, timer: VirtualTimer, pods: Pods, scale: FollowedCount | None) -> None:
        self.service, self.timer, self.pods, self.scale = service, timer, pods, scale
        self.rollout_findings: set[str] = set()
        self.published: list[int] = []

    async def ticks(self, n: int) -> None:
        for _ in range(n):
            await run_ticks(self.service, self.timer, 1)
            self.rollout_findings |= {f.summary for f in self.service.loop.detection.active() if f.kind == "rollout"}
            count = int(self.service.loop.board.latest(KEY).decision.desired_replicas)
            self.published.append(count)
            if self.scale is not None:
                self.scale.spec = count


async def _run(tmp_path: Path, counted: bool, script: Any) -> Run:
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    pods = Pods(clock)
    scale = FollowedCount() if counted else None
    planner = ContractPlanner(wanted=6)
    service, restored = build_service(
        settings_for(f"sqlite:///{tmp_path / 'k.db'}"),
        Sources(pods, StaticTargets([])),
        clock=clock,
        collector=pods,
        sleep=timer.sleep,
        planner=planner,
        **({"scale": scale} if scale is not None else {}),
    )
    await service.start(restored)
    run = Run(service, timer, pods, scale)
    try:
        await run.ticks(4)
        await script(run, planner)
    finally:
        service.stop.set()
        await service.wait()
    return run


async def _wave(run: Run, old: Sequence[str], new: Sequence[str], *, before_ready: Any = None) -> None:
    """One wave: ``old`` drained, their successors ``new`` serving a cold start later; ``before_ready`` runs
    mid-wave."""
    for pod in old:
        del run.pods.serving[pod]
    if before_ready is None:
        await run.ticks(COLD_TICKS)
    else:
        await run.ticks(4)
        await before_ready()
        await run.ticks(COLD_TICKS - 4)
    run.pods.serving.update(dict.fromkeys(new, "v2"))
    await run.ticks(1)


@pytest.mark.parametrize("counted", [False, True], ids=["replicas-alone", "scale-source-counts"])
async def test_a_planner_scale_down_mid_rollout_raises_no_too_wide_warning(tmp_path: Path, counted: bool) -> None:
    async def script(run: Run, planner: ContractPlanner) -> None:
        async def scale_down() -> None:
            # the planner lowers 6 -> 3 with wave 1 loading; once kvpilot has published it, the ReplicaSet removes
            # three old pods (they leave discovery at once)
            planner.wanted = 3
            await run.ticks(1)
            for pod in ("chat-2", "chat-3", "chat-4"):
                del run.pods.serving[pod]

        await _wave(run, ["chat-0"], ["new-0"])
        await _wave(run, ["chat-1"], ["new-1"], before_ready=scale_down)
        await _wave(run, ["chat-5"], ["new-2"])
        await run.ticks(6)

    run = await _run(tmp_path, counted, script)
    assert set(run.pods.serving.values()) == {"v2"}
    assert min(run.published[-3:]) == 3  # the rollout ran to its end under the planner's 3
    assert run.rollout_findings == set()  # 56d1890: "a rollout replaces 4 of 6 replicas at once (67%, above 25%)"


@pytest.mark.parametrize("counted", [False, True], ids=["replicas-alone", "scale-source-counts"])
async def test_a_wave_of_three_of_six_still_raises_it(tmp_path: Path, counted: bool) -> None:
    async def script(run: Run, planner: ContractPlanner) -> None:
        await _wave(run, ["chat-0"], ["new-0"])
        await _wave(run, ["chat-1", "chat-2", "chat-3"], ["new-1", "new-2", "new-3"])

    run = await _run(tmp_path, counted, script)
    assert any("a rollout replaces 3 of 6 replicas at once (50%, above 25%)" in s for s in run.rollout_findings), (
        run.rollout_findings
    )
