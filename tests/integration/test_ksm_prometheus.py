"""KubeStateMetricsScale against Debian's real Prometheus scraping a kube-state-metrics page: the queries it sends
are PromQL that Prometheus evaluates as meant (names regex, the deployments' matchers, ``up`` by job), the status
read equals the objects', a Deployment deleted while its exporter answers is gone, and an exporter that stops
answering deletes nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from collector.discovery.promql import PromQLSource
from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import ScaleView, deployment_rollout
from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus
from tests.unit.kvpilot.runtime.ksm_double import deployment, ksm_series

pytestmark = pytest.mark.integration

ROLLING = deployment("chat", replicas=10, generation=3, observed=3, updated=3, status_replicas=12, ready=10)
RECREATE = deployment("code-gen", replicas=3, generation=2, observed=2, updated=0, ready=0, strategy="Recreate")
KEYS = ["llm/chat", "llm/code-gen"]


def _page(*deployments: client.V1Deployment) -> bytes:
    """The exposition kube-state-metrics serves (Prometheus adds job and instance)."""
    lines = []
    for d in deployments:
        for labels, value in ksm_series(d, job="", instance=""):
            name = labels.pop("__name__")
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{inner}}} {value:g}")
    return ("\n".join(lines) + "\n").encode()


async def _until(scale: KubeStateMetricsScale, check: Callable[[ScaleView], bool], what: str) -> ScaleView:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = await scale.read(KEYS, time.time())
        if check(view):
            return view
        await asyncio.sleep(0.3)
    raise TimeoutError(what)


async def test_kube_state_metrics_read_through_a_real_prometheus(tmp_path: Path) -> None:
    pages: dict[str, bytes] = {"/metrics": _page(ROLLING, RECREATE)}
    with serve_pages(pages) as (host, port):
        scrape = [
            {
                "job_name": "kube-state-metrics",
                "honor_labels": True,
                "static_configs": [{"targets": [f"{host}:{port}"]}],
            }
        ]
        with run_prometheus(tmp_path, scrape_configs=scrape) as prom:
            prom.wait_for('kube_deployment_spec_replicas{deployment="code-gen"}', timeout_s=30)
            source = PromQLSource(prom.url, reader="thread", timeout_s=5.0)
            scale = KubeStateMetricsScale(source.query_vector)
            try:
                view = await _until(scale, lambda v: len(v.rollouts) == 2, "both Deployments read")
                assert dict(view.rollouts) == {
                    "llm/chat": deployment_rollout(ROLLING),
                    "llm/code-gen": deployment_rollout(RECREATE),
                }
                # code-gen deleted while kube-state-metrics answers: gone
                pages["/metrics"] = _page(ROLLING)
                await _until(scale, lambda v: v.gone == {"llm/code-gen"}, "code-gen reported deleted")
                # the exporter stops answering (up 0, its series stale): nothing is taken for deleted
                del pages["/metrics"]
                view = await _until(scale, lambda v: not v.replicas, "chat's series gone stale")
                assert view.gone == frozenset()
            finally:
                await source.aclose()
