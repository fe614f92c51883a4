"""vLLM V1 (`vllm/v1/metrics/loggers.py`): `vllm:` series labelled model_name and engine (engine index).

Modelled on a 0.10-era build, which still exports the names deprecated in 0.9 beside their replacements
(`gpu_cache_usage_perc`, `gpu_prefix_cache_*`, `time_per_output_token_seconds`): the vLLM project's own Grafana
dashboard (examples/online_serving/prometheus_grafana/grafana.json) queries the old ones, collectors the new.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition._hist import add
from simulator.snapshot import ReplicaSnapshot

_L = ["model_name", "engine"]


def families(r: ReplicaSnapshot) -> list[Metric]:
    lv = [r.model_name, "0"]

    def gauge(name: str, doc: str, value: float) -> Metric:
        g = GaugeMetricFamily(name, doc, labels=_L)
        g.add_metric(lv, value)
        return g

    def counter(name: str, doc: str, value: float) -> Metric:
        c = CounterMetricFamily(name, doc, labels=_L)
        c.add_metric(lv, value)
        return c

    def hist(name: str, doc: str, h) -> Metric:  # type: ignore[no-untyped-def]
        f = HistogramMetricFamily(name, doc, labels=_L)
        add(f, lv, h)
        return f

    success = CounterMetricFamily(
        "vllm:request_success", "Count of successfully processed requests.", labels=[*_L, "finished_reason"]
    )
    for reason, n in (("stop", r.requests_finished_total), ("length", 0), ("abort", r.requests_aborted_total)):
        success.add_metric([*lv, reason], n)
    # CacheConfig.metrics_info(): every field of vLLM's cache config as a label (values as vLLM prints them).
    config = {
        "block_size": str(r.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "engine": "0",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(r.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(config))
    info.add_metric(list(config.values()), 1.0)
    return [
        info,
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", r.requests_running),
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", r.requests_waiting),
        gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            r.kv_usage,
        ),
        counter(
            "vllm:gpu_prefix_cache_queries",
            "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use "
            "vllm:prefix_cache_queries instead.",
            r.prefix_queries_total,
        ),
        counter(
            "vllm:gpu_prefix_cache_hits",
            "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use "
            "vllm:prefix_cache_hits instead.",
            r.prefix_hits_total,
        ),
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", r.kv_usage),
        counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            r.prefix_queries_total,
        ),
        counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", r.prefix_hits_total
        ),
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", r.preemptions_total),
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", r.prompt_tokens_total),
        counter("vllm:generation_tokens", "Number of generation tokens processed.", r.generation_tokens_total),
        success,
        hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", r.ttft),
        hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", r.itl),
        hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", r.itl),
        hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", r.e2e),
        hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", r.queue_time),
        hist(
            "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", r.prefill_time
        ),
        hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", r.decode_time),
        hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            r.inference_time,
        ),
        hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", r.prompt_len),
        hist("vllm:request_generation_tokens", "Number of generation tokens processed.", r.output_len),
        # Without per-request max_tokens in the traces, the requested maximum is the generated length.
        hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            r.output_len,
        ),
    ]
