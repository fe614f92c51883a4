"""TensorRT-LLM behind Triton adapter (``inflight_batcher_llm/src/custom_metrics_reporter``).

TensorRT-LLM reports through a few gauge families, each split by a category label
(``request_type``, ``kv_cache_block_type``, ...); Triton core adds ``nv_inference_*`` per model.

Mapping decisions:
- ``requests_waiting`` = ``request_type="waiting"`` (queued in the executor), else unknown (``None``). Triton's
  ``nv_inference_pending_request_count`` is not that queue: it counts requests the core holds until the model's
  execute starts (triton-inference-server/server @ dcc9123, docs/user_guide/metrics.md, "Pending Request Count"),
  and TensorRT-LLM's execute hands every request to the executor at once (triton-inference-server/tensorrtllm_backend
  @ 0677fdc, inflight_batcher_llm/src/model_instance_state.cc, ``ModelInstanceState::enqueue``;
  NVIDIA/TensorRT-LLM @ 89fd9b7, triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/1/model.py,
  ``execute``), so it reads about 0 while the executor queues. Backends before the waiting category
  (tensorrtllm_backend @ 7f9aa46, custom_metrics_reporter.cc: active, max, scheduled, context) leave the queue unknown.
- ``requests_running`` = ``request_type="active"`` (every request in the in-flight batcher, context or
  generation phase); ``scheduled`` only counts those scheduled in the last iteration.
- ``kv_usage`` = ``kv_cache_block_type="fraction"``, else ``used / max`` blocks;
  ``kv_capacity_tokens`` = ``max * tokens_per`` blocks.
- Prefix cache: ``reused`` is the executor's cumulative count of KV blocks reused from earlier requests,
  so ``prefix_hits`` = ``reused * tokens_per`` (tokens, like other engines). Triton exports no matching
  count of looked-up blocks, so ``prefix_queries`` stays ``None``.
- The ``v1``/``inflight_batcher`` token series are per-iteration gauges, not counters: prompt and
  generation token counters stay ``None``. No preemption series: ``None``.
- Only the ``nv_trt_llm_*`` families identify the engine: Triton serving ONNX or graphdef models has the
  ``nv_inference_*`` series too, and is no LLM replica (its ``nv_gpu_*`` GPUs are still read).
- Several TensorRT-LLM models on one server are one replica each, never a sum.
- ``requests_finished`` = ``nv_inference_request_success`` of the TensorRT-LLM model only (an ensemble's
  pre/post-processing models count the same requests again); ``ttft`` = Triton's
  ``nv_inference_first_response_histogram_ms`` (decoupled models, when histograms are enabled), in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, read_mean
from collector.exposition import Sample

_KV = ("nv_trt_llm_kv_cache_block_metrics", "nv_trt_llm_kv_cache_block_statistics")
_REQUESTS = ("nv_trt_llm_request_metrics", "nv_trt_llm_request_statistics")


def _kv(kind: str) -> tuple[str, ...]:
    return tuple(f"{family}{{kv_cache_block_type={kind}}}" for family in _KV)


def _req(kind: str) -> tuple[str, ...]:
    return tuple(f"{family}{{request_type={kind}}}" for family in _REQUESTS)


FIELDS = {
    # never nv_inference_pending_request_count: Triton's queue before execute, not the executor's (module docstring)
    "requests_waiting": total(*_req("waiting")),
    "requests_running": total(*_req("active")),
    "kv_usage": mean(*_kv("fraction")),
    "requests_finished": total("nv_inference_request_success"),
    "ttft": histogram("nv_inference_first_response_histogram_ms", scale=1e-3),
}


def _blocks(families: Families, kind: str) -> float | None:
    return read_mean(families, tuple(Series.parse(s) for s in _kv(kind)))


def _derive(families: Families, values: dict[str, Any]) -> dict[str, Any]:
    max_blocks, used, tokens_per, reused = (_blocks(families, k) for k in ("max", "used", "tokens_per", "reused"))
    out: dict[str, Any] = {
        "kv_capacity_tokens": max_blocks * tokens_per if max_blocks is not None and tokens_per is not None else None,
        "prefix_hits": reused * tokens_per if reused is not None and tokens_per is not None else None,
    }
    if values.get("kv_usage") is None and used is not None and max_blocks:
        out["kv_usage"] = used / max_blocks
    return out


def _trtllm_model_only(families: Families) -> Callable[[Sample], bool] | None:
    """Keep Triton core samples of the model(s) that report TensorRT-LLM series."""
    models = {
        s.labels["model"]
        for name, fam in families.items()
        if name.startswith("nv_trt_llm_")
        for s in fam.samples
        if "model" in s.labels
    }
    if not models:
        return None
    return lambda s: not s.name.startswith("nv_inference_") or s.labels.get("model") in models


_IDENTIFYING = frozenset(_KV + _REQUESTS + ("nv_trt_llm_general_metrics", "nv_trt_llm_inflight_batcher_metrics"))

ADAPTER = DeclarativeAdapter(
    name="trtllm",
    fields=FIELDS,
    model_labels=("model",),
    extra_families=_IDENTIFYING,
    derive=_derive,
    prepare=_trtllm_model_only,
    # Triton core's nv_inference_* series are on every Triton page, LLM or not: only TensorRT-LLM's own series
    # make a page an LLM replica (a plain ONNX/graphdef Triton is GPUs only).
    identifying=_IDENTIFYING,
)
