"""Pods found through the (fake) Kubernetes API are scraped for real and land in FleetState with the
identity the pod gives them; a deleted pod stops being scraped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from collector.discovery.kubernetes import KubernetesDiscovery
from collector.scrape import Collector
from collector.state import FleetState
from tests.conftest import FIXTURES
from tests.fakekube import FakeKube
from tests.helpers.poll import until
from tests.services.pages import serve_pages

PAGES = {
    "/metrics": FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt",
    "/gpu": FIXTURES / "metrics" / "dcgm__DataDog__integrations-core__metrics.txt",
}


@pytest.fixture
def port() -> Iterator[int]:
    with serve_pages(PAGES) as (_host, bound):
        yield bound


def _pod(name: str, port: int, node: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "prod",
            "labels": {"kvpilot.io/scrape": "true", "app": "llama"},
            "annotations": {"kvpilot.io/port": str(port), **annotations},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }


async def test_discovered_pods_are_scraped_into_fleet_state(port: int) -> None:
    with FakeKube() as kube:
        kube.create("pods", _pod("llama-0", port, "gpu-node-1", {}))
        kube.create("pods", _pod("dcgm-abc", port, "gpu-node-1", {"kvpilot.io/kind": "gpu", "kvpilot.io/path": "/gpu"}))
        disc = KubernetesDiscovery(kube.api_client(), namespace="prod")
        state = FleetState()
        try:
            async with Collector() as collector:
                result = await collector.collect_once(await disc.targets())
                assert [r.error for r in result.results] == [None, None]
                state.observe(
                    result.replicas,
                    result.gpus,
                    now=time.time(),
                    down_targets=result.down_targets,
                    gpu_nodes_scraped=result.gpu_nodes_scraped,
                )
                (replica,) = state.replicas()
                assert (replica.key, replica.sample.deployment, replica.sample.engine) == (
                    "prod/llama-0",
                    "llama",
                    "vllm",
                )

                kube.delete("pods", "llama-0", "prod")
                await until(lambda: len(disc.snapshot()) == 1, what="the watch delivered the deletion", timeout_s=15)
                result = await collector.collect_once(await disc.targets())
                assert result.replicas == []
                assert len(result.gpus) >= 1
        finally:
            disc.stop()
