"""vLLM's KV capacity on pages built from vLLM's source, not captured: when ``num_gpu_blocks x block_size`` is the
pod's pool in tokens, and when the page cannot say.

The pages are written with prometheus_client as vLLM writes ``vllm:cache_config_info``: one sample per engine
(``vllm/v1/metrics/loggers.py``, ``log_metrics_info``), its labels every field of ``CacheConfig``
(``vllm/config/cache.py``, ``metrics_info``), in the order of the vllm-0.20.0 sdist on PyPI (sha256 a6d50152…e196cc72;
tag v0.20.0), plus ``kv_cache_size_tokens``/``kv_cache_max_concurrency`` from vllm-0.24.0 (sha256 0862453a…f614ac66).
Which figures are the engine's own comes from that source too:
- the front end adds up ``num_gpu_blocks`` over its data-parallel engines and writes the total on every engine's
  sample (``vllm/v1/engine/core_client.py``: "Sum values from all engines in DP case"; ``utils.py`` from 0.9.0);
- ``kv_cache_size_tokens`` is per engine ("do not sum across DP", 0.24.0 ``core_client.py``), and left "None" only
  for a model without KV cache groups (0.24.0 ``vllm/v1/engine/core.py``);
- with several KV groups (sliding-window beside full attention) the engine logs ``num_blocks // groups *
  block_size`` tokens (``vllm/v1/core/kv_cache_utils.py``, ``_report_kv_cache_config``, 0.9.2 to 0.23), so the
  product is ``groups`` times too large, while a model whose every layer slides has one group.
Values are chosen here.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from collector.adapt import adapt_page
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://10.0.0.7:8000/metrics", namespace="inference", deployment="m", pod="m-0")

# CacheConfig's fields in vllm-0.20.0 (vllm/config/cache.py), as metrics_info() labels them, with values as str() writes
# them for a V1 GPU server with prefix caching
_CACHE_CONFIG_0_20 = {
    "block_size": "16",
    "user_specified_block_size": "False",
    "user_specified_mamba_block_size": "False",
    "hash_block_size": "16",
    "gpu_memory_utilization": "0.9",
    "cache_dtype": "auto",
    "is_attention_free": "False",
    "num_gpu_blocks_override": "None",
    "sliding_window": "None",
    "enable_prefix_caching": "True",
    "prefix_caching_hash_algo": "sha256",
    "calculate_kv_scales": "False",
    "kv_cache_dtype_skip_layers": "[]",
    "mamba_page_size_padded": "None",
    "mamba_block_size": "None",
    "mamba_cache_dtype": "auto",
    "mamba_ssm_cache_dtype": "auto",
    "mamba_cache_mode": "none",
    "num_gpu_blocks": "None",
    "num_cpu_blocks": "None",
    "kv_sharing_fast_prefill": "False",
    "kv_cache_memory_bytes": "None",
    "kv_offloading_size": "None",
    "kv_offloading_backend": "native",
    "_block_size_resolved": "True",
}
# added by vllm-0.24.0, set from the engine's handshake
_SIZE_LABELS_0_24 = {"kv_cache_size_tokens": "None", "kv_cache_max_concurrency": "None"}


def _page(engines: int, **cache_config: str) -> str:
    """A V1 front end's page: the core gauges and one ``cache_config_info`` sample per engine, all from one config."""
    registry = CollectorRegistry()
    labels = dict(_CACHE_CONFIG_0_20)
    if "kv_cache_size_tokens" in cache_config:
        labels.update(_SIZE_LABELS_0_24)
    labels.update(cache_config)
    running = Gauge("vllm:num_requests_running", "r", ["model_name", "engine"], registry=registry)
    info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [*labels, "engine"],
                 registry=registry)  # fmt: skip
    for engine in range(engines):
        running.labels("m", str(engine)).set(1)
        info.labels(*labels.values(), str(engine)).set(1)
    return generate_latest(registry).decode()


def _capacity(page: str) -> float | None:
    (replica,) = adapt_page(page, TARGET, 1000.0).replicas
    return replica.kv_capacity_tokens


@pytest.mark.parametrize(
    ("engines", "cache_config", "expected"),
    [
        # one engine, full attention everywhere: one KV group, the product is the engine's "GPU KV cache size"
        (1, {"num_gpu_blocks": "20000"}, 20000 * 16.0),
        # two data-parallel engines of 20,000 blocks: each sample says 40,000 (the front end's sum), read once
        (2, {"num_gpu_blocks": "40000"}, 40000 * 16.0),
        # gpt-oss-type sliding-window + full layers in two KV groups: the engine counts 50,000 // 2 x 16 = 400,000
        # tokens, the product says 800,000; a model whose every layer slides would be right: the page cannot tell
        (1, {"num_gpu_blocks": "50000", "sliding_window": "128"}, None),
        # Gemma-3-type (5 sliding : 1 full, 7 groups on the 27B), two engines: unknown too
        (2, {"num_gpu_blocks": "70000", "sliding_window": "1024"}, None),
        # an attention-free (Mamba-only) model: the blocks hold sequences' states, not tokens
        (1, {"num_gpu_blocks": "2000", "is_attention_free": "True"}, None),
        # an encoder-only model on 0.24: no KV cache groups, so no size ("None") and a pool of one null block
        (1, {"num_gpu_blocks": "1", "kv_cache_size_tokens": "None"}, None),
        # from 0.24 the engine's group-aware size wins, summed over engines, whatever the layout
        (2, {"num_gpu_blocks": "70000", "sliding_window": "1024", "kv_cache_size_tokens": "855836"}, 2 * 855836.0),
        (2, {"num_gpu_blocks": "40000", "kv_cache_size_tokens": "320000"}, 2 * 320000.0),
    ],
)
def test_kv_capacity_is_what_the_engine_holds_or_unknown(
    engines: int, cache_config: dict[str, str], expected: float | None
) -> None:
    assert _capacity(_page(engines, **cache_config)) == expected


def test_a_v0_page_with_a_sliding_window_keeps_the_product() -> None:
    """V0 (no ``engine`` label; vLLM 0.6 ``vllm/engine/metrics.py``) runs every layer of a model alike: a
    sliding-window model's blocks are its token slots, and an interleaved one's window was dropped from the config
    (``sliding_window`` "None", vllm/config.py 0.8 and 0.9)."""
    page = (
        'vllm:num_requests_running{model_name="mistralai/Mistral-7B-v0.1"} 1.0\n'
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",'
        'gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="27000",num_gpu_blocks_override="None",'
        'sliding_window="4096",swap_space_bytes="4294967296"} 1.0\n'
    )
    assert _capacity(page) == 27000 * 16.0
