"""llama.cpp `llama-server --metrics`: unlabelled `llamacpp:` series (KV gauges removed mid-2025: absent)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from simulator.snapshot import ReplicaSnapshot


def families(r: ReplicaSnapshot) -> list[Metric]:
    prefill_s = r.prefill_time.total
    decode_s = r.decode_time.total
    return [
        CounterMetricFamily("llamacpp:prompt_tokens", "Number of prompt tokens processed.", r.prompt_tokens_total),
        CounterMetricFamily("llamacpp:prompt_seconds", "Prompt process time", prefill_s),
        CounterMetricFamily(
            "llamacpp:tokens_predicted", "Number of generation tokens processed.", r.generation_tokens_total
        ),
        CounterMetricFamily("llamacpp:tokens_predicted_seconds", "Predict process time", decode_s),
        CounterMetricFamily("llamacpp:n_decode", "Total number of llama_decode() calls", r.generation_tokens_total),
        GaugeMetricFamily(
            "llamacpp:prompt_tokens_seconds",
            "Average prompt throughput in tokens/s.",
            r.prompt_tokens_total / prefill_s if prefill_s else 0.0,
        ),
        GaugeMetricFamily(
            "llamacpp:predicted_tokens_seconds",
            "Average generation throughput in tokens/s.",
            r.generation_tokens_total / decode_s if decode_s else 0.0,
        ),
        GaugeMetricFamily("llamacpp:requests_processing", "Number of requests processing.", r.requests_running),
        GaugeMetricFamily("llamacpp:requests_deferred", "Number of requests deferred.", r.requests_waiting),
    ]
