"""vLLM adapter: V1 names (with the ``engine`` label of data-parallel engines) and the older V0 names.

Data parallelism: one pod may run several engines, each exporting its own series under ``engine="N"``.
The pod is one replica to the scaler, so counts, counters and histograms are summed over engines, and
``kv_usage`` is the mean over engines: every engine of a pod has the same cache config and so the same
number of blocks, which makes the mean of per-engine usage equal the usage of the pod's whole pool (a
max would flag a pod whose other engines still have room; a sum would exceed 1).

The model is in ``model_name``; Triton's vLLM backend (triton-inference-server/vllm_backend) writes the same series
with Triton's own ``model``/``version`` labels, one set per Triton model: each model is then a replica of its own.

V0's ``gpu_prefix_cache_hit_rate`` is a gauge of a ratio, not a pair of counters: it is deliberately
not mapped, so ``prefix_queries``/``prefix_hits`` stay ``None`` on such pages rather than invented.

Several API servers (``--api-server-count`` > 1) share one page through prometheus_client's multiprocess mode. From
0.9.2 to 0.11.0 ``kv_cache_usage_perc`` was declared without a ``multiprocess_mode``, so the page carries one sample
per API server process (label ``pid``), while ``gpu_cache_usage_perc`` and the request gauges are ``mostrecent`` (one
sample per engine, the last value set by any process; vllm-0.9.2 to vllm-0.11.0 sdists, vllm/v1/metrics/loggers.py;
``mostrecent`` for both from 0.11.1). Each engine returns a step's scheduler stats to one API server only
(vllm/v1/core/sched/scheduler.py ``update_from_output``, "Return stats to only one of the front-ends"), so a ``pid``
sample is that engine's usage as of the last stats its API server received: stale, or 0 if it never received any,
and the page does not say which is newest. ``kv_usage`` then reads ``gpu_cache_usage_perc``, which ``record`` sets
from the same value (on by default until 0.10.2); where it is hidden (0.11.0), each engine's highest ``pid`` sample,
which may be stale but never hides the usage the newest stats report.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from collector.engines._declarative import DeclarativeAdapter, histogram, mean, total
from collector.engines._read import Families, Series, find_family, structural, value_samples

_CACHE_CONFIG = "vllm:cache_config_info"
_KV_USAGE, _GPU_CACHE_USAGE = "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"
# prometheus_client's multiprocess mode labels a gauge's samples with the writing process in its default "all" mode
_PROCESS = "pid"

FIELDS = {
    "requests_waiting": total("vllm:num_requests_waiting"),
    "requests_running": total("vllm:num_requests_running"),
    "kv_usage": mean(_KV_USAGE, _GPU_CACHE_USAGE),  # per API server process: _kv_usage_of_api_servers
    "prefix_queries": total("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_hits": total("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "preemptions": total("vllm:num_preemptions"),
    "prompt_tokens": total("vllm:prompt_tokens"),
    "generation_tokens": total("vllm:generation_tokens"),
    # summed over finished_reason (stop, length, abort, ...): every request that left the engine
    "requests_finished": total("vllm:request_success"),
    "ttft": histogram("vllm:time_to_first_token_seconds"),
    "itl": histogram("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": histogram("vllm:e2e_request_latency_seconds"),
    "queue_time": histogram("vllm:request_queue_time_seconds"),
}


def _label_number(labels: dict[str, str], name: str) -> float | None:
    try:
        value = float(labels[name])
    except (KeyError, ValueError):  # label missing, or "None" before the profiler ran
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _mamba_layers(labels: dict[str, str]) -> bool:
    """Whether the cache config is a model's with Mamba-type layers beside attention (Qwen3-Next, Qwen3.5/3.6,
    Nemotron-H, Granite 4...): ``mamba_block_size`` or ``mamba_page_size_padded`` is a number above 0 (vLLM writes
    "None" for every other model, and older builds neither label). "0" is no size vLLM can hold: its CacheConfig
    declares ``mamba_block_size`` ``Field(gt=0)`` (0.12 to 0.34) and sets it only to a block size or the model length,
    and ``mamba_page_size_padded`` only to an attention page's bytes; a "0" is read as "None" is."""
    return any((_label_number(labels, name) or 0.0) > 0 for name in ("mamba_block_size", "mamba_page_size_padded"))


def _engine_reported_tokens(labels: dict[str, str]) -> float | None:
    """One engine's KV pool in tokens as the engine reports it (``kv_cache_size_tokens``, vLLM 0.24 and later).

    The engine's figure is group-aware: with hybrid KV (sliding-window and full-attention layers, Gemma-type models)
    a block does not hold ``block_size`` tokens of every layer, and the product is wrong (543,360 against the
    engine's 855,836 on one such model). It is written once per engine, not summed over data-parallel engines
    (vllm-0.24.0 sdist, vllm/v1/engine/core_client.py: "do not sum across DP").
    """
    return _label_number(labels, "kv_cache_size_tokens")


def _pool_product_tokens(labels: dict[str, str]) -> float | None:
    """``num_gpu_blocks * block_size`` where vLLM's source makes it the token capacity, else None.

    Where it is not, and the engine gives no size (before vLLM 0.24), the capacity is left unknown:
    - Mamba-type layers (``_mamba_layers``): the block pool is shared by the attention and Mamba groups, and up to
      vLLM 0.23 the front end wrote a ``block_size`` the engine did not use (vLLM issue 42966: "16" for blocks of
      528 tokens; on vLLM 0.20.2 with Qwen3.6-27B 1147 x 16 = 18,352 tokens where the engine's log said 1,708,404).
    - A ``sliding_window`` on a V1 page (``engine`` label, vLLM 0.9 and later): hybrid models (Gemma 2/3, gpt-oss)
      split their layers into several KV groups that draw on one pool, and the engine counts
      ``num_blocks // groups * block_size`` tokens (vllm/v1/core/kv_cache_utils.py, 0.9.2 to 0.23), so the
      product is that many times too large; a model whose every layer slides has one group and the product is
      right, but the page cannot tell the two apart. V0 pages (no ``engine`` label) treat every layer alike.
    - An attention-free model (``is_attention_free``, Mamba-only): the blocks hold sequences' states, not tokens.
    - ``kv_cache_size_tokens`` written but not a number: from 0.24 the engine leaves it "None" only when the model
      has no KV cache groups (encoder-only, attention-free; vllm/v1/engine/core.py), whose pool is one null block.
    """
    if _mamba_layers(labels) or labels.get("is_attention_free") == "True" or "kv_cache_size_tokens" in labels:
        return None
    if "engine" in labels and _label_number(labels, "sliding_window") is not None:
        return None
    blocks, block_size = _label_number(labels, "num_gpu_blocks"), _label_number(labels, "block_size")
    if blocks is None or not block_size:
        return None
    return blocks * block_size


def _kv_capacity_tokens(families: Families) -> float | None:
    """The KV pool of every engine of the pod, from ``cache_config_info``.

    The engine's own size is per engine (one info sample each, label ``engine``) and is summed over engines.
    ``num_gpu_blocks`` is not: the front end adds up the blocks of all its data-parallel engines and writes that
    total on every engine's sample ("Sum values from all engines in DP case", vllm/v1/engine/core_client.py and
    utils.py from 0.9.0; vllm/v1/metrics/loggers.py labels one copy of the same config per engine), so the product
    is already the pod's pool and is counted once. Builds that wrote one unlabelled sample (0.8 and V0) ran a single
    engine, or wrote ``num_gpu_blocks="None"`` in a data-parallel front end.
    """
    fam = find_family(families, _CACHE_CONFIG)
    if fam is None:
        return None
    reported: dict[str | None, float] = {}
    products: list[float] = []
    for s in fam.samples:
        tokens = _engine_reported_tokens(s.labels)
        if tokens is not None:
            reported[s.labels.get("engine")] = tokens
            continue
        product = _pool_product_tokens(s.labels)
        if product is not None:
            products.append(product)
    if reported:
        return math.fsum(reported.values())
    return max(products) if products else None


def _per_api_server(families: Families) -> bool:
    """Whether ``kv_cache_usage_perc`` comes once per API server process (multiprocess mode "all")."""
    return any(_PROCESS in s.labels for s in value_samples(families, Series(_KV_USAGE)))


def _layout(families: Families) -> tuple[float | None, bool]:
    """What follows from the page's names and labels: the KV capacity, and whether KV usage is per API server."""
    return _kv_capacity_tokens(families), _per_api_server(families)


def _kv_usage_of_api_servers(families: Families) -> float | None:
    """KV usage when each API server process writes its own ``kv_cache_usage_perc`` (module docstring): the
    ``mostrecent`` ``gpu_cache_usage_perc`` when the page has it, else each engine's highest sample, averaged over
    engines like ``kv_usage``."""
    recent = [s.value for s in value_samples(families, Series(_GPU_CACHE_USAGE)) if _PROCESS not in s.labels]
    recent = [v for v in recent if math.isfinite(v)]
    if recent:
        return math.fsum(recent) / len(recent)
    highest: dict[str | None, float] = {}
    for s in value_samples(families, Series(_KV_USAGE)):
        if math.isfinite(s.value):
            engine = s.labels.get("engine")
            highest[engine] = max(s.value, highest.get(engine, s.value))
    return math.fsum(highest.values()) / len(highest) if highest else None


def _derive(families: Families, _values: dict[str, Any]) -> dict[str, Any]:
    # read off the info series' labels (and the engines' label values) alone: once per page layout
    kv_capacity_tokens, per_api_server = structural(families, "vllm layout", partial(_layout, families))
    out: dict[str, Any] = {"kv_capacity_tokens": kv_capacity_tokens}
    if per_api_server:
        out["kv_usage"] = _kv_usage_of_api_servers(families)
    return out


ADAPTER = DeclarativeAdapter(
    name="vllm",
    fields=FIELDS,
    model_labels=("model_name", "model"),
    extra_families=frozenset({_CACHE_CONFIG}),
    derive=_derive,
)
