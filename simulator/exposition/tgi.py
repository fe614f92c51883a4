"""TGI (`router/src/server.rs`, `backends/v3`): unlabelled `tgi_` series; durations in seconds."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition._hist import add
from simulator.snapshot import ReplicaSnapshot


def families(r: ReplicaSnapshot) -> list[Metric]:
    out: list[Metric] = []
    for name, value in (
        ("tgi_queue_size", r.requests_waiting),
        ("tgi_batch_current_size", r.requests_running),
        ("tgi_batch_current_max_tokens", round(r.kv_usage * r.kv_capacity_tokens)),
        ("tgi_batch_max_total_tokens", r.kv_capacity_tokens),
    ):
        out.append(GaugeMetricFamily(name, name, value=value))
    # TGI's counters carry no _total suffix: built as gauges, typed `counter` by the renderer (BARE_COUNTERS).
    for name, value in (
        ("tgi_request_count", r.requests_finished_total + r.requests_aborted_total + r.requests_running),
        ("tgi_request_success", r.requests_finished_total),
    ):
        out.append(GaugeMetricFamily(name, name, value=value))
    fail = GaugeMetricFamily("tgi_request_failure", "tgi_request_failure", labels=["err"])
    fail.add_metric(["aborted"], r.requests_aborted_total)
    out.append(fail)
    for name, h in (
        ("tgi_request_duration", r.e2e),
        ("tgi_request_queue_duration", r.queue_time),
        ("tgi_request_mean_time_per_token_duration", r.itl),
        ("tgi_request_input_length", r.prompt_len),
        ("tgi_request_generated_tokens", r.output_len),
    ):
        f = HistogramMetricFamily(name, name, labels=[])
        add(f, [], h)
        out.append(f)
    return out
