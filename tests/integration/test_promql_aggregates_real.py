"""``promql_mode: aggregates`` against a REAL Prometheus scraping fixture pages: the ad-hoc expressions, the
server-side selection of replicas and the down targets parse and answer on the real engine, and a replica read
one by one equals the same page scraped directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.samples import TargetInfo
from collector.scrape import Collector
from collector.state import FleetState
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
