"""A GPU page on no node is named by its URL (``GpuSample.page``, the ``target_down`` finding's replica): never with
the password a discovered target's URL may carry, since the finding's labels are on the unauthenticated /metrics
(``kvpilot_finding_active``) and in Alertmanager, and its summary in the API."""

from __future__ import annotations

from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from collector.state import FleetState
from detectors import target_down
from detectors.thresholds import DEFAULT

SECRET = "s3cret-Pa55"
PAGE = TargetInfo(url=f"http://scraper:{SECRET}@10.0.0.7:9400/metrics", kind="gpu")  # dcgm-exporter, no NODE_NAME
SHOWN = "http://redacted@10.0.0.7:9400/metrics"


def _tick(state: FleetState, t: float, ok: bool) -> CollectResult:
    gpu = GpuSample(node="", index="0", uuid="GPU-0", model_name="H100", timestamp=t, utilisation=0.5)
    result = CollectResult(t, (ScrapeResult(PAGE, ok=ok, timestamp=t, duration_s=0.0, gpus=(gpu,) if ok else ()),))
    scraped = result.gpu_nodes_scraped
    state.observe(result.replicas, result.gpus, now=t, down_targets=result.down_targets, gpu_nodes_scraped=scraped)
    return result


def test_a_down_gpu_page_on_no_node_is_named_without_its_password() -> None:
    state = FleetState(stale_after_s=30)
    answered = _tick(state, 0.0, ok=True)
    assert [g.page for g in answered.gpus] == [SHOWN]
    assert answered.gpu_nodes_scraped == frozenset({SHOWN})  # the same name, so the page's GPUs stay its own
    for t in range(5, 50, 5):
        _tick(state, float(t), ok=False)
    [down] = target_down.detect(state, thresholds=DEFAULT, now=45.0)
    # Before: replica="http://scraper:s3cret-Pa55@10.0.0.7:9400/metrics" in the labels and the summary
    assert down.alert_labels()["replica"] == SHOWN
    assert SECRET not in down.summary
    assert SHOWN in down.summary
