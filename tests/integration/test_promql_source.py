"""The PromQL source against a REAL Prometheus scraping real fixture pages on loopback: the samples it
rebuilds through Prometheus' query API equal those of scraping the same pages directly."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.promql.series import families_selector, rebuild_families
from collector.samples import TargetInfo
from collector.scrape import Collector
from tests.conftest import FIXTURES
from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration

PAGES = {
    "/vllm": FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt",
    "/dcgm": FIXTURES / "metrics" / "dcgm__DataDog__integrations-core__metrics.txt",
}


@pytest.fixture
def pages() -> Iterator[str]:
    with serve_pages(PAGES) as (host, port):
        yield f"{host}:{port}"


def _canonical(sample: object) -> dict[str, object]:
    """A sample's measured values, without who/when (those differ by construction between the paths)."""
    drop = {"namespace", "deployment", "replica", "node", "timestamp", "pod", "container"}
    return {k: v for k, v in dataclasses.asdict(sample).items() if k not in drop}  # type: ignore[call-overload]


async def test_promql_source_equals_direct_scrape(tmp_path: Path, pages: str) -> None:
    scrape_configs = [
        {
            "job_name": "engines",
            "metrics_path": "/vllm",
            "static_configs": [{"targets": [pages], "labels": {"namespace": "prod", "pod": "llama-0"}}],
        },
        {"job_name": "dcgm", "metrics_path": "/dcgm", "static_configs": [{"targets": [pages]}]},
        {"job_name": "missing", "metrics_path": "/nothing", "static_configs": [{"targets": [pages]}]},
    ]
    with run_prometheus(tmp_path, scrape_configs=scrape_configs) as prom:
        # every job scraped at least once, the 404 one included (its up == 0 is what the source must report)
        prom.wait_for(
            'count(up{job="engines"} == 1) and count(up{job="dcgm"} == 1) and count(up{job="missing"} == 0)',
            timeout_s=60,
        )
        prom.wait_for('{__name__=~"vllm:.+"}', timeout_s=30)
        prom.wait_for('{__name__=~"DCGM_.+"}', timeout_s=30)

        source = PromQLSource(prom.url, jobs=["engines", "dcgm", "missing"])
        try:
            via_prometheus = await source.collect_once()
        finally:
            await source.aclose()

    engine_target = TargetInfo(url=f"http://{pages}/vllm", namespace="prod", pod="llama-0", deployment="llama")
    gpu_target = TargetInfo(url=f"http://{pages}/dcgm", kind="gpu")
    # scrape the same (static) pages directly; the server outlived Prometheus
    async with Collector(clock=VirtualClock(0.0)) as collector:
        direct = await collector.collect_once([engine_target, gpu_target])

    assert [r.error for r in direct.results] == [None, None]
    assert sorted(r.target.url for r in via_prometheus.results) == [
        f"promql://{job}/{pages}" for job in ("dcgm", "engines", "missing")
    ]
    engines = [r for r in via_prometheus.results if r.replicas]
    assert len(engines) == 1
    replica = engines[0].replicas[0]
    assert (replica.namespace, replica.replica, replica.deployment) == ("prod", "llama-0", "llama")
    assert replica.ttft is not None  # the comparison below covers histograms and counters, not just Nones
    assert replica.prompt_tokens is not None
    assert [_canonical(r) for r in via_prometheus.replicas] == [_canonical(r) for r in direct.replicas]
    assert sorted(map(str, map(_canonical, via_prometheus.gpus))) == sorted(map(str, map(_canonical, direct.gpus)))
    assert len(via_prometheus.gpus) >= 1
    # the 404 target is up == 0 in Prometheus: reported down, not silently absent
    down = [r for r in via_prometheus.results if not r.ok]
    assert [r.error for r in down] == ["down in Prometheus (up == 0)"]


def test_selector_is_anchored_alternation_with_suffixes() -> None:
    sel = families_selector(frozenset({"vllm:num_requests_running", "vllm:prompt_tokens_total"}))
    assert sel == '{__name__=~"(?:vllm:num_requests_running|vllm:prompt_tokens)(?:_total|_bucket|_sum|_count)?|up"}'


def test_rebuild_families_types_from_metadata_or_suffixes() -> None:
    series = [
        {
            "metric": {"__name__": "vllm:prompt_tokens_total", "job": "j", "instance": "i", "model_name": "m"},
            "value": [0, "10"],
        },
        {"metric": {"__name__": "vllm:e2e_request_latency_seconds_bucket", "le": "+Inf"}, "value": [0, "3"]},
        {"metric": {"__name__": "vllm:e2e_request_latency_seconds_count"}, "value": [0, "3"]},
        {"metric": {"__name__": "vllm:num_requests_running"}, "value": [0, "2"]},
    ]
    wanted = frozenset({"vllm:prompt_tokens", "vllm:e2e_request_latency_seconds", "vllm:num_requests_running"})
    fams = rebuild_families(series, {}, wanted)
    assert {n: f.type for n, f in fams.items()} == {
        "vllm:prompt_tokens": "counter",  # a _total series is a counter, named without _total
        "vllm:e2e_request_latency_seconds": "histogram",  # buckets make a histogram
        "vllm:num_requests_running": "gauge",
    }
    # Prometheus' target labels are not part of the page
    assert fams["vllm:prompt_tokens"].samples[0].labels == {"model_name": "m"}
