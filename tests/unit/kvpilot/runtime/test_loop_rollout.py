"""A rolling update through the live control loop: the published decision rises by the surge while the rollout
runs (one cold start ahead of each further wave) and falls back to the planner's count once every replica runs
the new version. The service is real (collector stage double aside: scripted samples), with a planner that asks
for a fixed count so that what moves the published number is the rollout stage alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from detectors.kv_exhaustion import Demand
from detectors.registry import Detection
from kvpilot.runtime.scale_view import ScaleView
from scaler.rollout import DeploymentRollout
from tests.unit.kvpilot.fleet_double import ENGINE, START, make_service, run_ticks, serving_sample
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, ContractPlanner

COLD_TICKS = 24  # 120 s at 5 s ticks: the loop's default cold start for a planner without one


@dataclass
class RollingFleet:
    """Replicas (pod, version) that serve metrics now; the test moves them between ticks as waves would."""

    clock: VirtualClock
    replicas: list[tuple[str, str]] = field(default_factory=lambda: [(f"chat-{i}", "v1") for i in range(4)])

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        samples = tuple(serving_sample(pod, "n0", t, model=model) for pod, model in self.replicas)
        return CollectResult(
            timestamp=t, results=(ScrapeResult(ENGINE, True, t, 0.01, replicas=samples, engine="vllm"),)
        )


@dataclass
class DeploymentScale:
    """The Deployment as Kubernetes would report it (KubernetesScale): spec.replicas and its rollout status."""

    rollout: DeploymentRollout | None = None

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        rollouts = {KEY: self.rollout} if self.rollout is not None else {}
        return ScaleView(replicas={KEY: 4}, rollouts=rollouts)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


def latest(service: Any) -> Any:
    published = service.loop.board.latest(KEY)
    assert published is not None
    return published.decision


def published(service: Any) -> int:
    return int(latest(service).desired_replicas)


async def test_versions_among_replicas_raise_the_published_count_ahead_of_each_wave_and_release_it_after(
    db: str,
) -> None:
    clock = VirtualClock(START)
    fleet: Any = RollingFleet(clock)
    service, restored, timer = make_service(db, clock, fleet, planner=ContractPlanner(wanted=4))
    await service.start(restored)
    await run_ticks(service, timer, 6)
    assert published(service) == 4  # one version: the planner's count as it is
    seen: list[int] = []
    # Four waves of one (maxSurge 0, maxUnavailable 1): drain an old replica, its successor ready a cold start later.
    for wave in range(4):
        fleet.replicas = [r for r in fleet.replicas if r[0] != f"chat-{wave}"]
        for _ in range(COLD_TICKS):
            await run_ticks(service, timer, 1)
            seen.append(published(service))
        fleet.replicas.append((f"chat-new-{wave}", "v2"))
        await run_ticks(service, timer, 1)
        seen.append(published(service))
        if wave == 0:
            # The new version is visible and old replicas remain: the next wave may start at any tick, so its
            # successors are asked for now: 4 + 1.
            assert published(service) == 5
            decision = latest(service)
            assert decision.reason == "rollout_surge"
            assert "3 replicas left to replace in waves of 1, no wave loading" in decision.message
    # While wave 1 loaded the rollout was not yet visible (no new version scraped; the deficit alone could be a
    # crash): the count held at 4. From the first new replica on it stayed raised through every later wave, and
    # while a wave loads it covers that wave and the next (which starts within a cold start): 4 + 2.
    first_raise = next(i for i, n in enumerate(seen) if n > 4)
    assert set(seen[:first_raise]) == {4}
    assert first_raise == COLD_TICKS
    later = seen[first_raise : 4 * (COLD_TICKS + 1) - 1]
    assert min(later) == 5
    assert max(later) == 6
    # once raised for a wave, the surge holds until the rollout ends: lowering it mid-wave would delete the wave's
    # successor first (a ReplicaSet scales down pods that are not ready first)
    assert min(later[later.index(6) :]) == 6
    await run_ticks(service, timer, 3)
    assert published(service) == 4  # every ready replica on v2: the surge is withdrawn
    service.stop.set()
    await service.wait()


async def test_the_deployment_status_raises_the_count_at_the_first_wave(db: str) -> None:
    clock = VirtualClock(START)
    fleet: Any = RollingFleet(clock)
    scale = DeploymentScale()
    service, restored, timer = make_service(
        db,
        clock,
        fleet,
        planner=ContractPlanner(wanted=4),
        scale=scale,
    )
    await service.start(restored)
    await run_ticks(service, timer, 4)
    assert published(service) == 4
    # kubectl set image: generation 2 not yet observed (maxSurge 0, maxUnavailable 1).
    scale.rollout = DeploymentRollout(
        generation=2,
        observed_generation=1,
        replicas=4,
        updated_replicas=0,
        status_replicas=4,
        ready_replicas=4,
        max_surge=0,
        max_unavailable=1,
    )
    await run_ticks(service, timer, 1)
    assert published(service) == 6  # the wave starting now and the next: before any pod of the new version exists
    scale.rollout = DeploymentRollout(
        generation=2,
        observed_generation=2,
        replicas=4,
        updated_replicas=4,
        status_replicas=4,
        ready_replicas=4,
        max_surge=0,
        max_unavailable=1,
    )
    await run_ticks(service, timer, 1)
    assert published(service) == 4  # complete: every pod on the newest template
    service.stop.set()
    await service.wait()


@dataclass
class ForecastingPlanner(ContractPlanner):
    """Decisions carrying the planner's numbers, as scaler.planner's do."""

    def decide(self, state: Any, now: float, **kw: Any) -> list[Any]:
        return [
            dataclasses.replace(d, forecast={"capacity_rps": 10.0, "arrival_rate": 9.0, "horizon_s": 155.0})
            for d in super().decide(state, now, **kw)
        ]


async def test_the_loop_hands_the_planners_capacity_and_forecast_to_kv_exhaustion(db: str) -> None:
    clock = VirtualClock(START)
    detection = Detection(only=["kv_exhaustion"])
    fleet: Any = RollingFleet(clock)
    service, restored, timer = make_service(db, clock, fleet, planner=ForecastingPlanner(wanted=4), detection=detection)
    await service.start(restored)
    await run_ticks(service, timer, 3)
    assert detection._demand == {KEY: Demand(capacity_rps=10.0, forecast_rps=9.0, horizon_s=155.0)}
    service.stop.set()
    await service.wait()
