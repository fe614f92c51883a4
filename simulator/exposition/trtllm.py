"""TensorRT-LLM behind Triton (`inflight_batcher_llm/src/custom_metrics_reporter`): one family per category."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from simulator.snapshot import ReplicaSnapshot


def families(r: ReplicaSnapshot) -> list[Metric]:
    base = {"model": "tensorrt_llm", "version": "1"}
    req = GaugeMetricFamily(
        "nv_trt_llm_request_metrics", "TRT LLM request metrics", labels=["model", "version", "request_type"]
    )
    req_values: list[tuple[str, float]] = [
        ("active", r.requests_running),
        ("max", 256),
        ("scheduled", r.requests_running),
        ("context", 0),
        ("waiting", r.requests_waiting),
    ]
    for kind, v in req_values:
        req.add_metric([base["model"], base["version"], kind], v)
    kv = GaugeMetricFamily(
        "nv_trt_llm_kv_cache_block_metrics",
        "TRT LLM KV cache block metrics",
        labels=["model", "version", "kv_cache_block_type"],
    )
    used = round(r.kv_usage * r.num_gpu_blocks)
    kv_values: list[tuple[str, float]] = [
        ("max", r.num_gpu_blocks),
        ("free", r.num_gpu_blocks - used),
        ("used", used),
        ("tokens_per", r.block_size),
        ("reused", r.prefix_hits_total // max(r.block_size, 1)),
        ("fraction", r.kv_usage),
    ]
    for kind, v in kv_values:
        kv.add_metric([base["model"], base["version"], kind], v)
    pending = GaugeMetricFamily(
        "nv_inference_pending_request_count", "Instantaneous number of pending requests", labels=["model", "version"]
    )
    pending.add_metric([base["model"], base["version"]], r.requests_waiting)
    success = CounterMetricFamily(
        "nv_inference_request_success", "Number of successful inference requests", labels=["model", "version"]
    )
    success.add_metric([base["model"], base["version"]], r.requests_finished_total)
    return [req, kv, pending, success]
