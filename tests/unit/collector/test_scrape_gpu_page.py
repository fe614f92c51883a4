"""A GPU target (``kind: gpu``) whose page holds none of the GPU exporters' families is down, saying what the page
holds, as an engine target's unreadable page is (issue 12): it used to read as a node with no GPUs, without a word.
An empty page, which dcgm-exporter serves until its first collection, is no GPUs for a grace first."""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.adapt import NoGpuFamilies, adapt_page
from collector.clock import VirtualClock
from collector.promql.series import read_answers
from collector.samples import TargetInfo
from collector.scrape import Collector, ScrapeConfig
from tests.conftest import FIXTURES
from tests.helpers.clocks import SteppingClock
from tests.services.pages import serve_pages

LOWER_CASE = FIXTURES / "metrics" / "dcgm-lowercase-names-mig__NVIDIA__dcgm-exporter__issue_272__excerpt.txt"
DCGM = FIXTURES / "metrics" / "dcgm__DataDog__integrations-core__metrics.txt"
VLLM = FIXTURES / "metrics" / "vllm__DataDog__integrations-core__vllm_metrics.txt"
START = 1_700_000_000.0
NO_SAMPLES = b"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"


@pytest.fixture
def served() -> Iterator[tuple[dict[str, Path | bytes], str]]:
    pages: dict[str, Path | bytes] = {"/lower": LOWER_CASE, "/vllm": VLLM, "/empty": b"", "/no-samples": NO_SAMPLES}
    with serve_pages(pages) as (host, port):
        yield pages, f"http://{host}:{port}"


def _gpu(base: str, path: str) -> TargetInfo:
    return TargetInfo(url=f"{base}{path}", kind="gpu", node="n1", pod="dcgm-exporter-x")


async def test_a_page_of_other_names_is_down_with_the_error_parse_gives(served: tuple[dict, str]) -> None:
    _, base = served
    lower, vllm = _gpu(base, "/lower"), _gpu(base, "/vllm")
    async with Collector(clock=VirtualClock(0.0)) as c:
        result = await c.collect_once([lower, vllm])
    assert [r.ok for r in result.results] == [False, False]
    assert result.gpu_nodes_scraped == frozenset()  # no page said which GPUs the node has: none vanished
    with pytest.raises(NoGpuFamilies) as parsed:  # `kvpilot parse --engine dcgm`'s error on the same page
        adapt_page(LOWER_CASE.read_bytes(), TargetInfo(url="file"), 0.0, engine="dcgm")
    assert result.results[0].error == f"unreadable page: {parsed.value}"
    assert "page has none of the GPU exporters' families" in str(parsed.value)
    assert "dcgm_" in str(parsed.value)  # the lower-case DCGM hint
    assert "it reads as vllm" in (result.results[1].error or "")
    health = c.health.get(lower.url)
    assert health is not None
    assert (health.up, health.last_error) == (False, result.results[0].error)


async def test_a_gpu_family_without_gpus_is_no_gpus_not_an_error(served: tuple[dict, str]) -> None:
    _, base = served
    async with Collector(clock=VirtualClock(0.0)) as c:
        (res,) = (await c.collect_once([_gpu(base, "/no-samples")])).results
    assert (res.ok, res.error, res.gpus) == (True, None, ())


async def test_an_empty_page_is_no_gpus_for_the_grace_then_down_once(
    served: tuple[dict, str], caplog: pytest.LogCaptureFixture
) -> None:
    pages, base = served
    target = _gpu(base, "/empty")
    clock = VirtualClock(0.0)
    ups = []
    with caplog.at_level(logging.WARNING, logger="collector.health"):
        async with Collector(ScrapeConfig(empty_gpu_page_grace_s=60.0), clock=clock) as c:
            for _ in range(7):  # 0, 15, ..., 90 s
                (res,) = (await c.collect_once([target])).results
                ups.append(res.ok)
                clock.advance(15.0)
            assert res.error == "unreadable page: page has none of the GPU exporters' families: " + (
                "the page has no metric families at all"
            )
            down = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
            assert down == [f"target {target.url} is down: {res.error}"]  # once, not per scrape
            pages["/empty"] = DCGM  # the first collection: GPUs
            (res,) = (await c.collect_once([target])).results
            assert (res.ok, len(res.gpus)) == (True, 3)
            # empty right after a page: the exporter answers without its GPUs (fallen off the bus, as FleetState
            # keeps them, findings open), for as long as it lasts
            pages["/empty"] = b""
            for _ in range(8):
                clock.advance(15.0)
                result = await c.collect_once([target])
                assert (result.results[0].ok, result.gpus, result.gpu_nodes_scraped) == (True, [], {"n1"})
            # a failure, then empty pages: the exporter restarting, the grace again
            del pages["/empty"]
            assert not (await c.collect_once([target])).results[0].ok
            pages["/empty"] = b""
            after_restart = []
            for _ in range(5):
                clock.advance(15.0)
                after_restart.append((await c.collect_once([target])).results[0].ok)
    assert ups == [True, True, True, True, False, False, False]  # 0-45 s within 60 s; 60 s on, down
    assert after_restart == [True, True, True, True, False]


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_neither_stretches_nor_ends_the_grace(served: tuple[dict, str], step_s: float) -> None:
    # NTP steps the wall clock after the second empty page. The grace ran on the pages' wall stamps: a step back
    # kept the target up on empty pages for the hour more, a step ahead took it down at once.
    _, base = served
    target = _gpu(base, "/empty")
    clock, ups = SteppingClock(START), []
    async with Collector(ScrapeConfig(empty_gpu_page_grace_s=60.0), clock=clock) as c:
        for i in range(7):  # 0, 15, ..., 90 s
            if i == 2:
                clock.step(step_s)
            (res,) = (await c.collect_once([target])).results
            ups.append(res.ok)
            clock.advance(15.0)
    assert ups == [True, True, True, True, False, False, False]


def test_the_error_keeps_what_it_says_across_the_reader_process() -> None:
    error = NoGpuFamilies({})
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.empty) == (NoGpuFamilies, str(error), True)


def test_through_prometheus_a_target_with_only_up_stays_as_it_was() -> None:
    # Prometheus is asked only for the names the adapters read: an inference job's target of which it has only `up`
    # reads as a "GPU" target with nothing (collector.promql.series._target), no error, as before
    up = {"metric": {"__name__": "up", "job": "vllm", "instance": "10.0.0.7:8000"}, "value": [1.0, "1"]}
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [up]}}).encode()
    (result,) = read_answers([("up", body)], None, {}, 1.0, frozenset({"vllm"}), 0.0)
    assert (result.ok, result.error, result.target.kind, result.gpus) == (True, None, "gpu", ())
