"""TGI (`router/src/server.rs`, `backends/v3`): unlabelled `tgi_` series; durations in seconds."""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition._hist import add
from simulator.histogram import TGI_DURATION_BUCKETS
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
    durations = TGI_DURATION_BUCKETS
    for name, h, bounds in (
        ("tgi_request_duration", r.e2e, durations),
        ("tgi_request_queue_duration", r.queue_time, durations),
        ("tgi_request_inference_duration", r.inference_time, durations),
        ("tgi_request_mean_time_per_token_duration", r.itl, durations),
        # Token-count histograms keep the simulator's 1-2-5 bounds (TGI's own are not in ENGINES.md).
        ("tgi_request_input_length", r.prompt_len, None),
        ("tgi_request_generated_tokens", r.output_len, None),
    ):
        f = HistogramMetricFamily(name, name, labels=[])
        add(f, [], h, bounds)
        out.append(f)
    return out
