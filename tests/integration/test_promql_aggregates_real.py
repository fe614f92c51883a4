"""``promql_mode: aggregates`` against a REAL Prometheus scraping fixture pages: the ad-hoc expressions, the
server-side selection of replicas and the down targets parse and answer on the real engine, and a replica read
one by one equals the same page scraped directly."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.samples import TargetInfo
from collector.scrape import Collector
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.thresholds import Thresholds
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration

PAGE = FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt"


@pytest.fixture
def pages() -> Iterator[str]:
    with serve_pages({"/chat-0": PAGE, "/chat-1": PAGE}) as (host, port):
        yield f"{host}:{port}"


def _job(pages: str, pod: str) -> dict[str, object]:
    labels = {"namespace": "prod", "deployment": "chat", "pod": pod}
    return {"job_name": pod, "metrics_path": f"/{pod}", "static_configs": [{"targets": [pages], "labels": labels}]}


def _canonical(sample: object) -> dict[str, object]:
    drop = {"namespace", "deployment", "replica", "node", "timestamp", "pod", "container"}
    return {k: v for k, v in dataclasses.asdict(sample).items() if k not in drop}  # type: ignore[call-overload]


async def test_aggregates_mode_on_a_real_prometheus(tmp_path: Path, pages: str) -> None:
    jobs = [_job(pages, "chat-0"), _job(pages, "chat-1"), _job(pages, "chat-2")]  # chat-2's page is a 404: down
    with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
        # two samples of every series (rates need them) and the 404 target seen down
        prom.wait_for('count(count_over_time(vllm:num_requests_running{deployment="chat"}[1m]) >= 2) == 2')
        prom.wait_for('up{pod="chat-2"} == 0')
        source = PromQLSource(prom.url, mode="aggregates", kv_from=0.0, max_replicas=10, timeout_s=10.0)
        try:
            result = await source.collect_once()
        finally:
            await source.aclose()

    assert source.rules_in_use is False  # no recording rules loaded: the same expressions ran ad hoc
    (agg,) = source.last_aggregates
    assert (agg.key, agg.replicas, agg.ready_replicas) == ("prod/chat", 3, 2)
    assert (agg.requests_running, agg.requests_waiting, agg.kv_usage_mean, agg.kv_usage_max) == (0, 0, 0, 0)
    assert agg.requests_finished_rate == 0  # a fixed page: counters do not move
    assert agg.ttft_window is not None
    assert agg.ttft_window.bounds[-1] == float("inf")
    # kv_from 0: every live replica is selected and read series by series, as a scrape would read its page
    engine = TargetInfo(url=f"http://{pages}/chat-0", namespace="prod", pod="chat-0", deployment="chat")
    async with Collector(clock=VirtualClock(0.0)) as collector:
        direct = await collector.collect_once([engine])
    assert sorted(r.replica for r in result.replicas) == ["chat-0", "chat-1"]
    assert all(_canonical(r) == _canonical(direct.replicas[0]) for r in result.replicas)
    assert [(t.pod, t.deployment_key) for t in result.down_targets] == [("chat-2", "prod/chat")]
    state = FleetState()
    state.observe(result.replicas, result.gpus, now=source.clock.now(), down_targets=result.down_targets)
    state.observe_deployments(source.last_aggregates, now=source.clock.now())
    view = state.deployments()["prod/chat"]
    assert (view.replica_count, view.ready_replicas, len(view.replicas)) == (3, 2, 2)


AMD_PAGE = FIXTURES / "metrics" / "amd-dme-mi300x-amd-prefix-ecc-health__handwritten.txt"
AMD_IDLE_PAGE = FIXTURES / "metrics" / "amd-dme-mi300x-gfx-grep__ROCm__device-metrics-exporter__pull_236__excerpt.txt"


def _gpu_fields(gpu: object) -> dict[str, object]:
    # Prometheus stamps its own time; the rest is the page's
    return {k: v for k, v in dataclasses.asdict(gpu).items() if k not in ("timestamp", "page")}  # type: ignore[call-overload]


async def test_aggregates_mode_reads_the_amd_gpus_a_detector_needs(tmp_path: Path) -> None:
    # AMD_PAGE: GPU 0 serves llm/vllm-llama-0 (gfx activity 97), GPU 1 is unallocated with 2 uncorrectable ECC
    # errors; AMD_IDLE_PAGE (no prefix): one healthy unallocated GPU. vllm-llama-0 holds 3 running requests and its
    # counters do not move: stuck.
    stuck = PAGE.read_bytes().replace(
        b'vllm:num_requests_running{model_name="facebook/opt-125m"} 0.0',
        b'vllm:num_requests_running{model_name="facebook/opt-125m"} 3.0',
    )
    assert stuck != PAGE.read_bytes()
    pages = {"/vllm-llama-0": stuck, "/amd": AMD_PAGE, "/amd-idle": AMD_IDLE_PAGE}
    with serve_pages(pages) as (host, port):
        where = f"{host}:{port}"
        engine = {"namespace": "llm", "deployment": "llama", "pod": "vllm-llama-0", "node": "mi300x-node-1"}
        jobs: list[dict[str, object]] = [
            {
                "job_name": "vllm",
                "metrics_path": "/vllm-llama-0",
                "static_configs": [{"targets": [where], "labels": engine}],
            },
            # honor_labels, as the exporter's chart's ServiceMonitor: a GPU keeps the workload's namespace and pod
            {"job_name": "amd", "metrics_path": "/amd", "honor_labels": True, "static_configs": [{"targets": [where]}]},
            {
                "job_name": "amd-idle",
                "metrics_path": "/amd-idle",
                "honor_labels": True,
                "static_configs": [{"targets": [where]}],
            },
        ]
        with run_prometheus(tmp_path, scrape_configs=jobs) as prom:
            prom.wait_for('amd_gpu_health{pod="vllm-llama-0"}')
            prom.wait_for('gpu_gfx_activity{job="amd-idle"}')
            prom.wait_for('vllm:num_requests_running{pod="vllm-llama-0"} == 3')
            source = PromQLSource(prom.url, mode="aggregates", max_replicas=10, timeout_s=10.0, reader="thread")
            state = FleetState()
            try:
                for _ in range(2):  # two ticks: the replica's progress is known from its second sample
                    result = await source.collect_once()
                    now = source.clock.now()
                    state.observe(result.replicas, result.gpus, now=now, gpu_nodes_scraped=result.gpu_nodes_scraped)
                    await asyncio.sleep(1.0)
            finally:
                await source.aclose()
        async with Collector(clock=VirtualClock(0.0)) as collector:
            direct = await collector.collect_once([TargetInfo(url=f"http://{where}/amd", kind="gpu")])

    assert [r.replica for r in result.replicas] == ["vllm-llama-0"]
    # Both GPUs of AMD_PAGE (one serving the stuck replica, one with ECC errors), none of AMD_IDLE_PAGE's
    assert sorted((g.node, g.index) for g in result.gpus) == [("mi300x-node-1", "0"), ("mi300x-node-1", "1")]
    assert [r.target.kind for r in result.results if r.gpus] == ["gpu"]
    # The same GpuSample fields as the page scraped directly: utilisation, ECC, health, temperatures, power, VRAM
    read = {g.index: _gpu_fields(g) for g in result.gpus}
    scraped = {g.index: _gpu_fields(g) for g in direct.gpus}
    assert read == scraped
    assert read["0"]["utilisation"] == 0.97
    assert read["1"]["ecc_dbe_volatile"] == 2
    assert read["0"]["extra"]["amd_health"] == 1
    assert read["0"]["last_xid"] is None  # no XID made up
    # GPU 0 keeps its workload's pod (its replica is read with it): the stuck-GPU detector joins it to the stuck
    # replica and finds it pinned busy without progress; GPU 1 (unallocated, ECC errors) joins no replica, though
    # it is on the replica's node, and raises nothing (ECC is shown, not acted on)
    assert (read["0"]["namespace"], read["0"]["pod"], read["1"]["pod"]) == ("llm", "vllm-llama-0", None)
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=now)
    assert [(f.subject.gpu, f.evidence["condition"]) for f in findings] == [("0", "hang")]
    # a GPU the selection no longer names has not vanished from its exporter
    assert result.gpu_nodes_scraped == frozenset()
