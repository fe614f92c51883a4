"""TensorRT-LLM behind Triton: the documentation sample and the category-label mapping."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState

TARGET = TargetInfo(url="http://triton:8002/metrics", pod="triton-0", node="node-a")


def _one(text: str) -> ReplicaSample:
    page = adapt_page(text, TARGET, 5.0)
    assert page.engine == "trtllm"
    assert len(page.replicas) == 1
    return page.replicas[0]


def test_sample_values_read_off_the_page(metrics_fixtures: Path) -> None:
    r = _one((metrics_fixtures / "trtllm-triton__triton-inference-server__tensorrtllm_backend__README.txt").read_text())
    assert r.model == "tensorrt_llm"
    assert (r.requests_waiting, r.requests_running) == (1.0, 0.0)  # request_type waiting, active
    assert r.kv_usage == 0.4875  # kv_cache_block_type="fraction"
    assert r.kv_capacity_tokens == 6239 * 64  # max blocks x tokens_per
    assert r.requests_finished == 0.0
    # no reused-block series on this sample; token series are per-iteration gauges
    assert (r.prefix_hits, r.prefix_queries, r.prompt_tokens, r.generation_tokens) == (None, None, None, None)


_ENSEMBLE = """# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 6
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 4
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 1000
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 250
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 32
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused",model="tensorrt_llm",version="1"} 12
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 40
nv_inference_request_success{model="preprocessing",version="1"} 40
nv_inference_request_success{model="tensorrt_llm",version="1"} 40
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="ensemble",version="1"} 9
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 2
# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="100"} 30
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="500"} 38
nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="+Inf"} 40
nv_inference_first_response_histogram_ms_sum{model="tensorrt_llm",version="1"} 4200
nv_inference_first_response_histogram_ms_count{model="tensorrt_llm",version="1"} 40
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.93
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 60000000000
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-1"} 80000000000
"""


def test_ensemble_counts_only_the_trtllm_model_and_derives_from_blocks() -> None:
    r = _one(_ENSEMBLE)
    assert r.requests_finished == 40.0  # not 120: ensemble and preprocessing see the same requests
    # no waiting category: unknown. Triton's pending count (2 here) is its queue before the model's execute, which
    # hands every request to the executor at once; the executor's queue is not on this page
    assert r.requests_waiting is None
    assert r.requests_running == 6.0
    assert r.kv_usage == 0.25  # no fraction: used / max
    assert (r.kv_capacity_tokens, r.prefix_hits) == (32000.0, 384.0)  # 1000 x 32, 12 reused x 32
    assert r.ttft is not None
    assert r.ttft.bounds == (0.1, 0.5, math.inf)
    assert r.ttft.counts == (30.0, 38.0, 40.0)
    assert r.ttft.sum == pytest.approx(4.2)  # milliseconds -> seconds


def test_triton_page_also_yields_its_gpus() -> None:
    page = adapt_page(_ENSEMBLE, TARGET, 5.0)
    assert len(page.gpus) == 1
    gpu = page.gpus[0]
    assert (gpu.uuid, gpu.node, gpu.pod, gpu.utilisation) == ("GPU-1", "node-a", "triton-0", 0.93)
    assert (gpu.memory_used_bytes, gpu.memory_free_bytes) == (60e9, 20e9)


def test_waiting_category_is_the_queue_whatever_triton_holds_before_execute(metrics_fixtures: Path) -> None:
    # the README sample: request_type="waiting" 1 beside nv_inference_pending_request_count 0
    page = (metrics_fixtures / "trtllm-triton__triton-inference-server__tensorrtllm_backend__README.txt").read_text()
    assert "nv_inference_pending_request_count" in page
    assert _one(page).requests_waiting == 1.0
    # an executor with 7 queued while Triton holds 3 before execute: the executor's 7
    busy = page.replace('request_type="waiting",version="1"} 1', 'request_type="waiting",version="1"} 7').replace(
        'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0',
        'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 3',
    )
    assert _one(busy).requests_waiting == 7.0


def test_an_unknown_trtllm_queue_reaches_the_fleet_as_unknown_not_zero() -> None:
    # the pending count must not come back as a 0 (or 2) queue through the deployment view the planner, the
    # detectors and the API read; None there is the "no metrics" path (no scale-down on a blind replica)
    state = FleetState()
    for t in (0.0, 10.0):
        page = adapt_page(_ENSEMBLE, replace(TARGET, namespace="prod", deployment="llama"), t)
        state.observe(page.replicas, page.gpus, now=t)
    dep = state.deployments()["prod/llama"]
    assert dep.requests_running == 6.0
    assert dep.requests_waiting is None
