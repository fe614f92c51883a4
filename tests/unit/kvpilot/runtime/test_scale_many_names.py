"""The scale sources asked, tick after tick, about names no Deployment has: the deployments a gateway's counter names
(``collector.arrivals``), up to 256 a tick, where its label is one each client makes up (a requested model name).
Each such name was kept for good to be said once, and each namespace's last list beside it: memory grew by every
name and namespace ever asked about. Now the latest 4,096 names are kept, and a namespace's list only while asked
about (session 29 helper F, hostile and parallel input round 14)."""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client

from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import KubernetesScale, ScaleSource
from tests.fakekube.scale import deployment
from tests.fakekube.server import FakeKube
from tests.unit.kvpilot.runtime.ksm_double import deployment as ksm_deployment
from tests.unit.kvpilot.runtime.ksm_double import ksm_series

NAMES_A_TICK = 256  # kvpilot.runtime.loop.GATEWAY_ONLY_ASKED
MEASURED_FROM, TICKS = 40, 120  # past the names kept (4,096: 16 ticks), then as many again and more


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    kube = FakeKube().start()
    try:
        yield kube
    finally:
        kube.stop()


def _made_up(tick: int) -> list[str]:
    """The tick's made-up names, in two namespaces of their own (a namespace label made up as well)."""
    return [f"gw-{tick}-{i % 2}/model-{tick}-{i}" for i in range(NAMES_A_TICK)]


async def _held(scale: ScaleSource, module: str) -> tuple[int, list[dict[str, int]]]:
    """(bytes allocated in ``module`` and still held after TICKS ticks less those held at MEASURED_FROM, each tick's
    replica counts) over ticks asking about llm/chat and a tick's made-up names."""
    counts = []
    tracemalloc.start()
    try:
        for tick in range(TICKS):
            view = await scale.read(["llm/chat", *_made_up(tick)], float(tick))
            counts.append(dict(view.replicas))
            if tick == MEASURED_FROM:
                start = tracemalloc.take_snapshot()
        end = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    only = [tracemalloc.Filter(True, f"*{module}")]
    held = sum(s.size_diff for s in end.filter_traces(only).compare_to(start.filter_traces(only), "filename"))
    return held, counts


async def test_kubernetes_holds_no_more_for_every_name_asked_about(
    fake_kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kube.create("deployments", deployment("chat", "llm", replicas=3), namespace="llm")
    api = fake_kube.api_client()
    try:
        # the lines are not kept while measuring: a log record holds the name it says
        with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.scale_view"):
            held, counts = await _held(KubernetesScale(client.AppsV1Api(api)), "kvpilot/runtime/scale_view.py")
        with caplog.at_level(logging.INFO, logger="kvpilot.runtime.scale_view"):
            scale = KubernetesScale(client.AppsV1Api(api))
            for tick in (0, 1, 0):
                await scale.read(["llm/chat", *_made_up(tick)], float(tick))
    finally:
        api.close()
    assert counts == [{"llm/chat": 3}] * TICKS
    # was 80 ticks x 256 names, ~2.4 MB more held at the end
    assert held < 64 * 1024
    # each made-up name said once, tick 0's not again
    said = [r.getMessage() for r in caplog.records if "no Deployment" in r.getMessage()]
    assert len(said) == len(set(said)) == 2 * NAMES_A_TICK


async def test_kube_state_metrics_holds_no_more_for_every_name_asked_about(caplog: pytest.LogCaptureFixture) -> None:
    chat = [
        {"metric": labels, "value": [0.0, repr(value)]}
        for labels, value in ksm_series(ksm_deployment("chat", replicas=3, namespace="llm"))
    ]

    async def query(_text: str, _now: float) -> Sequence[Any]:
        return chat

    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.scale_ksm"):
        held, counts = await _held(KubeStateMetricsScale(query), "kvpilot/runtime/scale_ksm.py")
    with caplog.at_level(logging.INFO, logger="kvpilot.runtime.scale_ksm"):
        scale = KubeStateMetricsScale(query)
        for tick in (0, 1, 0):
            await scale.read(["llm/chat", *_made_up(tick)], float(tick))
    assert counts == [{"llm/chat": 3}] * TICKS
    assert held < 64 * 1024
    said = [r.getMessage() for r in caplog.records if "exports no Deployment" in r.getMessage()]
    assert len(said) == len(set(said)) == 2 * NAMES_A_TICK
