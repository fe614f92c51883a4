"""A rolling update seen through kube-state-metrics (PromQL mode) reaches the rollout stage's surge decision tick
for tick as the same Deployment read from the Kubernetes API does: the live service, the loopback Prometheus API
server answering the series kube-state-metrics would export for each state of the Deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import KubernetesScale
from tests.services.promapi import FakeFleet
from tests.unit.kvpilot.fleet_double import START, make_service, run_ticks
from tests.unit.kvpilot.runtime.ksm_double import deployment, ksm_series, ksm_up
from tests.unit.kvpilot.runtime.test_loop_rollout import RollingFleet, latest, published
from tests.unit.kvpilot.runtime.test_loop_scale import ContractPlanner

# The Deployment tick by tick: steady, then `kubectl set image` (generation 2 not yet observed; maxSurge 0,
# maxUnavailable 1), the first wave under way, then every pod on the newest template.
STEADY = deployment("chat", replicas=4, generation=1, observed=1, max_surge=0, max_unavailable=1)
EDITED = deployment("chat", replicas=4, generation=2, observed=1, updated=0, max_surge=0, max_unavailable=1)
WAVE = deployment("chat", replicas=4, generation=2, observed=2, updated=1, ready=3, max_surge=0, max_unavailable=1)
DONE = deployment("chat", replicas=4, generation=2, observed=2, max_surge=0, max_unavailable=1)
TIMELINE = [STEADY] * 4 + [EDITED, WAVE, WAVE, DONE, DONE]


class DeploymentNow:
    """The Kubernetes API's list of one namespace, holding the Deployment as it is now."""

    def __init__(self) -> None:
        self.now: client.V1Deployment = STEADY

    def list_namespaced_deployment(self, namespace: str, **_: object) -> Any:
        return client.V1DeploymentList(items=[self.now])


async def _published(db: str, scale: Any, show: Any) -> list[tuple[int, str]]:
    """(desired, reason) published after each tick of TIMELINE, ``show(d)`` putting the Deployment in place first."""
    clock = VirtualClock(START)
    service, restored, timer = make_service(
        db, clock, RollingFleet(clock), planner=ContractPlanner(wanted=4), scale=scale
    )
    await service.start(restored)
    seen: list[tuple[int, str]] = []
    try:
        for d in TIMELINE:
            show(d)
            await run_ticks(service, timer, 1)
            seen.append((published(service), latest(service).reason))
    finally:
        service.stop.set()
        await service.wait()
    return seen


async def test_kube_state_metrics_reach_the_same_surge_as_the_deployment_object(
    tmp_path: Path, promapi_fleet: tuple[FakeFleet, str]
) -> None:
    apps = DeploymentNow()
    from_kubernetes = await _published(
        f"sqlite:///{tmp_path / 'k8s.db'}", KubernetesScale(apps), lambda d: setattr(apps, "now", d)
    )
    fleet, url = promapi_fleet
    source = PromQLSource(url, reader="thread", timeout_s=5.0)

    def export(d: client.V1Deployment) -> None:
        fleet.ksm = [*ksm_series(d), ksm_up()]

    try:
        from_ksm = await _published(
            f"sqlite:///{tmp_path / 'ksm.db'}", KubeStateMetricsScale(source.query_vector), export
        )
    finally:
        await source.aclose()
    desired = [n for n, _ in from_ksm]
    # steady at the planner's 4; raised at the edit, before any pod of the new template exists (the wave starting
    # now and the next: 4 + 2); back to 4 once every pod runs the newest template
    assert desired[:4] == [4, 4, 4, 4]
    assert desired[4] == 6
    assert from_ksm[4][1] == "rollout_surge"
    assert desired[-1] == 4
    assert from_ksm == from_kubernetes
