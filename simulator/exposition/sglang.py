"""SGLang (`python/sglang/srt/metrics/collector.py`, with --enable-metrics): `sglang:` series.

Scheduler gauges and token counters carry `model_name` and `tp_rank`; request histograms only `model_name`
(as in a real v0.5 capture, tests/fixtures/metrics/sglang__*).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition._hist import add
from simulator.snapshot import ReplicaSnapshot

_RANKED = ["model_name", "tp_rank"]


def families(r: ReplicaSnapshot) -> list[Metric]:
    ranked = [r.model_name, "0"]
    out: list[Metric] = []
    hit_rate = r.prefix_hits_total / r.prefix_queries_total if r.prefix_queries_total else 0.0
    for name, doc, value in (
        ("sglang:num_running_reqs", "The number of running requests.", r.requests_running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", r.requests_waiting),
        ("sglang:num_used_tokens", "The number of used tokens.", round(r.kv_usage * r.kv_capacity_tokens)),
        ("sglang:token_usage", "The token usage.", r.kv_usage),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", r.kv_capacity_tokens),
    ):
        g = GaugeMetricFamily(name, doc, labels=_RANKED)
        g.add_metric(ranked, value)
        out.append(g)
    for name, doc, value in (
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", r.prompt_tokens_total),
        ("sglang:generation_tokens", "Number of generation tokens processed.", r.generation_tokens_total),
        ("sglang:cached_tokens", "Number of cached prompt tokens.", r.prefix_hits_total),
        ("sglang:num_requests", "Number of requests processed.", r.requests_finished_total),
    ):
        c = CounterMetricFamily(name, doc, labels=_RANKED)
        c.add_metric(ranked, value)
        out.append(c)
    for name, doc, h in (
        ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", r.ttft),
        ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", r.itl),
        ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", r.e2e),
        ("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", r.queue_time),
    ):
        f = HistogramMetricFamily(name, doc, labels=["model_name"])
        add(f, [r.model_name], h)
        out.append(f)
    return out
