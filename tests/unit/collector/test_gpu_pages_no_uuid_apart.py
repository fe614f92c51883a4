"""Two GPU pages on no node whose GPUs carry no UUID (an exporter that labels its GPUs by index only) are two sets of
GPUs: each GPU is keyed by its page where no node places it, so GPU "0" of one page never stands for GPU "0" of the
other (before: both keyed ``/0``, the second page's sample replaced the first's, and one GPU was seen)."""

from __future__ import annotations

from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState

PAGE_A = TargetInfo(url="http://10.0.0.7:9400/metrics", kind="gpu")
PAGE_B = TargetInfo(url="http://10.0.0.8:9400/metrics", kind="gpu")


def _gpu(t: float, utilisation: float) -> GpuSample:
    return GpuSample(node="", index="0", uuid=None, model_name="H100", timestamp=t, utilisation=utilisation)


def _tick(state: FleetState, t: float, *, b_lists_its_gpu: bool = True) -> None:
    b_gpus = (_gpu(t, 0.75),) if b_lists_its_gpu else ()
    result = CollectResult(
        t,
        (
            ScrapeResult(PAGE_A, ok=True, timestamp=t, duration_s=0.0, gpus=(_gpu(t, 0.25),)),
            ScrapeResult(PAGE_B, ok=True, timestamp=t, duration_s=0.0, gpus=b_gpus),
        ),
    )
    scraped = result.gpu_nodes_scraped
    state.observe(result.replicas, result.gpus, now=t, down_targets=result.down_targets, gpu_nodes_scraped=scraped)


def test_index_only_gpus_of_two_pages_on_no_node_are_two_gpus() -> None:
    state = FleetState(stale_after_s=30)
    _tick(state, 0.0)
    gpus = state.gpus()
    assert len(gpus) == 2  # before: 1, page B's sample in place of page A's
    assert sorted((g.sample.page, g.sample.utilisation) for g in gpus) == [(PAGE_A.url, 0.25), (PAGE_B.url, 0.75)]
    assert len({g.key for g in gpus}) == 2


def test_a_gpu_gone_from_one_page_leaves_the_other_pages_gpu_present() -> None:
    state = FleetState(stale_after_s=30)
    _tick(state, 0.0)
    _tick(state, 5.0, b_lists_its_gpu=False)  # page B answers without its GPU: it fell off the bus
    present = {g.sample.page: g.present for g in state.gpus()}
    assert present == {PAGE_A.url: True, PAGE_B.url: False}


def test_a_gpu_with_a_uuid_on_no_node_keeps_its_key() -> None:
    gpu = GpuSample(node="", index="0", uuid="GPU-1", model_name="H100", timestamp=0.0, page=PAGE_A.url)
    assert gpu.key == "/GPU-1"  # a UUID names the GPU on any page: its identity (store rows, findings) is unchanged
