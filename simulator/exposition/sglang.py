"""SGLang (`python/sglang/srt/metrics/collector.py`, with --enable-metrics): `sglang:` series, model_name."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition._hist import add
from simulator.snapshot import ReplicaSnapshot


def families(r: ReplicaSnapshot) -> list[Metric]:
    lv = [r.model_name]
    out: list[Metric] = []
    hit_rate = r.prefix_hits_total / r.prefix_queries_total if r.prefix_queries_total else 0.0
    for name, doc, value in (
        ("sglang:num_running_reqs", "The number of running requests.", r.requests_running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", r.requests_waiting),
        ("sglang:num_used_tokens", "The number of used tokens.", round(r.kv_usage * r.kv_capacity_tokens)),
        ("sglang:token_usage", "The token usage.", r.kv_usage),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate),
    ):
        g = GaugeMetricFamily(name, doc, labels=["model_name"])
        g.add_metric(lv, value)
        out.append(g)
    for name, doc, value in (
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", r.prompt_tokens_total),
        ("sglang:generation_tokens", "Number of generation tokens processed.", r.generation_tokens_total),
        ("sglang:cached_tokens", "Number of cached prompt tokens.", r.prefix_hits_total),
        ("sglang:num_requests", "Number of requests processed.", r.requests_finished_total),
        ("sglang:num_aborted_requests", "Number of requests aborted.", r.requests_aborted_total),
    ):
        c = CounterMetricFamily(name, doc, labels=["model_name"])
        c.add_metric(lv, value)
        out.append(c)
    for name, doc, h in (
        ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", r.ttft),
        ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", r.itl),
        ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", r.e2e),
        ("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", r.queue_time),
    ):
        f = HistogramMetricFamily(name, doc, labels=["model_name"])
        add(f, lv, h)
        out.append(f)
    return out
