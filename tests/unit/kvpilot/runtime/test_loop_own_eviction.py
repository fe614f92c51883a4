"""kvpilot's own drain is no rolling update: through the service as ``kvpilot run`` wires it (the real drain
actuator against the fake Kubernetes API, its ``on_evict`` told to the loop's rollout stage), a pod the drain
evicts leaves discovery with no rollout surge published, while the same departure made by someone else (a
rollout's wave) raises one. Discovery lists the pods the API server holds, as the Kubernetes discovery would."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult, VirtualTimer
from kvpilot.runtime.scale_view import ScaleView
from kvpilot.runtime.service import AlwaysLeader
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from store import repo
from store.db import transaction
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, run_ticks, serving_sample, settings_for
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, ContractPlanner

PODS = {"chat-0": "n0", "chat-1": "n1"}  # pod -> node; node n0's GPU is the one an XID takes down
GPU = TargetInfo(url="http://10.0.0.9:9400/metrics", kind="gpu", node="n0")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube()).start()
    try:
        for node in sorted(set(PODS.values())):
            fake.create("nodes", {"metadata": {"name": node}, "spec": {}})
        for pod, node in PODS.items():
            fake.create(
                "pods",
                {
                    "metadata": {
                        "name": pod,
                        "namespace": "llm",
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "c", "uid": "u"}],
                    },
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
                },
                namespace="llm",
            )
        yield fake
    finally:
        fake.stop()


@dataclass
class PodDiscovery:
    """Engine targets for the pods the API server holds now (an evicted pod is gone from it)."""

    kube: FakeKube

    async def targets(self) -> list[TargetInfo]:
        pods, _ = self.kube.store.list(self.kube.resource("pods"), "llm")
        return [
            TargetInfo(
                url=f"http://{p['metadata']['name']}:8000/metrics",
                namespace="llm",
                deployment="chat",
                pod=p["metadata"]["name"],
                node=p["spec"]["nodeName"],
            )
            for p in pods
        ] + [GPU]


@dataclass
class PodFleet:
    """Every engine target discovery lists serves metrics; node n0's GPU reports ``xid``."""

    clock: VirtualClock
    xid: int | None = None

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        results = [
            ScrapeResult(
                target,
                True,
                t,
                0.01,
                engine="vllm",
                replicas=(serving_sample(target.pod or "", target.node or "", t),),
            )
            for target in targets
            if target.kind == "engine"
        ]
        gpu = GpuSample(
            node="n0", index="0", uuid="GPU-0", model_name="H100", timestamp=t, utilisation=0.5, last_xid=self.xid
        )
        results.append(ScrapeResult(GPU, True, t, 0.01, gpus=(gpu,)))
        return CollectResult(timestamp=t, results=tuple(results))


@dataclass
class HeldCount:
    """spec.replicas holds at 2: the ReplicaSet replaces a pod that goes (its successor loads)."""

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        return ScaleView(replicas={KEY: 2})


@pytest.mark.parametrize(
    ("xid", "deleted_by_someone_else", "surge"),
    [
        # XID 79 on n0: kvpilot's drain evicts chat-0 and tells the rollout stage first: no surge
        (79, None, False),
        # no fault; chat-1 deleted by another hand (a rollout's wave): the rollout stage surges
        (None, "chat-1", True),
    ],
)
async def test_a_pod_kvpilots_drain_evicts_raises_no_rollout_surge(
    kube: FakeKube,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    xid: int | None,
    deleted_by_someone_else: str | None,
    surge: bool,
) -> None:
    api = kube.api_client()
    monkeypatch.setattr("kvpilot.runtime.wiring._kube_api_client", lambda **_: api)  # build_actuation's NodeDrainer
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    settings = settings_for(
        f"sqlite:///{tmp_path / 'k.db'}",
        ha={"enabled": True},  # on a cluster: the real drain actuator
        drains={"dry_run": False, "require_approval": False},
    )
    service, restored = build_service(
        settings,
        Sources(PodDiscovery(kube), StaticTargets([])),
        clock=clock,
        collector=PodFleet(clock, xid=xid),
        sleep=timer.sleep,
        planner=ContractPlanner(wanted=2),
        scale=HeldCount(),
        leadership=AlwaysLeader(),
    )
    await service.start(restored)
    try:
        await run_ticks(service, timer, 4)
        if deleted_by_someone_else is not None:
            kube.delete("pods", deleted_by_someone_else, "llm")
        else:

            def drained() -> list[Any]:
                with transaction(service.sessions) as s:
                    return [d.state for d in repo.list_drains(session=s).items]

            await until(lambda: drained() == ["done"], what="kvpilot's drain of n0 evicted chat-0", timeout_s=20)
        pods, _ = kube.store.list(kube.resource("pods"), "llm")
        assert len(pods) == 1  # one pod gone either way; its successor would load for a cold start
        board: Any = service.loop.board
        published = []
        for _ in range(6):
            await run_ticks(service, timer, 1)
            decision = board.latest(KEY).decision
            published.append((decision.desired_replicas, decision.reason))
        if surge:
            assert max(n for n, _ in published) > 2
            assert "rollout_surge" in {reason for _, reason in published}
        else:
            assert published == [(2, "predictive")] * 6
    finally:
        service.stop.set()
        await service.wait()
        api.close()
