"""The vLLM project's own Grafana dashboard returns data against the simulator: a real Prometheus scrapes the live
simulator's vLLM pages (found through its http_sd endpoint) and every query of that dashboard is run.

The queries are copied verbatim from vllm-project/vllm, examples/online_serving/prometheus_grafana/grafana.json at
commit e88892c9080b29aa3dbc1d1096ba719ab0886163 (Apache-2.0), in panel order. Operators keep that dashboard beside
kvpilot's, so the simulator must serve what it reads, under the names it reads.
"""

# ruff: noqa: E501  (the vLLM dashboard's queries are kept verbatim, one per line)
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.live_fleet import has_data, live_simulator, poll
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.e2e

# (panel title, expr) from the vLLM dashboard; $model_name and $__rate_interval are substituted below.
VLLM_DASHBOARD: list[tuple[str, str]] = [
    ("E2E Request Latency", 'histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("E2E Request Latency", 'histogram_quantile(0.95, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("E2E Request Latency", 'histogram_quantile(0.9, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("E2E Request Latency", 'histogram_quantile(0.5, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("E2E Request Latency", 'rate(vllm:e2e_request_latency_seconds_sum{model_name="$model_name"}[$__rate_interval])\n/\nrate(vllm:e2e_request_latency_seconds_count{model_name="$model_name"}[$__rate_interval])'),
    ("Token Throughput", 'rate(vllm:prompt_tokens_total{model_name="$model_name"}[$__rate_interval])'),
    ("Token Throughput", 'rate(vllm:generation_tokens_total{model_name="$model_name"}[$__rate_interval])'),
    ("Time Per Output Token Latency", 'histogram_quantile(0.99, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time Per Output Token Latency", 'histogram_quantile(0.95, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time Per Output Token Latency", 'histogram_quantile(0.9, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time Per Output Token Latency", 'histogram_quantile(0.5, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time Per Output Token Latency", 'rate(vllm:time_per_output_token_seconds_sum{model_name="$model_name"}[$__rate_interval])\n/\nrate(vllm:time_per_output_token_seconds_count{model_name="$model_name"}[$__rate_interval])'),
    ("Scheduler State", 'vllm:num_requests_running{model_name="$model_name"}'),
    ("Scheduler State", 'vllm:num_requests_swapped{model_name="$model_name"}'),
    ("Scheduler State", 'vllm:num_requests_waiting{model_name="$model_name"}'),
    ("Time To First Token Latency", 'histogram_quantile(0.99, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time To First Token Latency", 'histogram_quantile(0.95, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time To First Token Latency", 'histogram_quantile(0.9, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time To First Token Latency", 'histogram_quantile(0.5, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="$model_name"}[$__rate_interval])))'),
    ("Time To First Token Latency", 'rate(vllm:time_to_first_token_seconds_sum{model_name="$model_name"}[$__rate_interval])\n/\nrate(vllm:time_to_first_token_seconds_count{model_name="$model_name"}[$__rate_interval])'),
    ("Cache Utilization", 'vllm:gpu_cache_usage_perc{model_name="$model_name"}'),
    ("Cache Utilization", 'vllm:cpu_cache_usage_perc{model_name="$model_name"}'),
    ("Request Prompt Length", 'sum by(le) (increase(vllm:request_prompt_tokens_bucket{model_name="$model_name"}[$__rate_interval]))'),
    ("Request Generation Length", 'sum by(le) (increase(vllm:request_generation_tokens_bucket{model_name="$model_name"}[$__rate_interval]))'),
    ("Finish Reason", 'sum by(finished_reason) (increase(vllm:request_success_total{model_name="$model_name"}[$__rate_interval]))'),
    ("Queue Time", 'rate(vllm:request_queue_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Requests Prefill and Decode Time", 'rate(vllm:request_prefill_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Requests Prefill and Decode Time", 'rate(vllm:request_decode_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Max Generation Token in Sequence Group", 'rate(vllm:request_max_num_generation_tokens_sum{model_name="$model_name"}[$__rate_interval])'),
]  # fmt: skip

# Series the dashboard reads that vLLM V1 (which the simulator models) no longer has. Keep this to the minimum.
EXPECTED_EMPTY: dict[str, str] = {
    "vllm:num_requests_swapped": "V1 has no swapping (a preempted request is recomputed), so no swapped gauge",
    "vllm:cpu_cache_usage_perc": "V1 has no CPU KV-cache gauge (CPU offload is not a swap space any more)",
}

# Grafana's $__rate_interval is max(4 x scrape interval, step + scrape interval); one minute is what it picks for a
# one-hour range at ordinary panel widths, and long enough to hold completions at the simulator's request rate.
RATE_INTERVAL = "1m"


def _expected_empty(expr: str) -> str | None:
    return next((series for series in EXPECTED_EMPTY if series + "{" in expr), None)


def test_vllm_dashboard_queries_return_data(tmp_path: Path) -> None:
    with (
        live_simulator(replicas=2) as sim_url,
        run_prometheus(
            tmp_path, scrape_configs=[{"job_name": "vllm", "http_sd_configs": [{"url": f"{sim_url}/sd"}]}]
        ) as prom,
    ):
        # the dashboard's one template variable: label_values(model_name)
        models = prom.wait_for("count by (model_name) (vllm:num_requests_running)", timeout_s=60)
        model = models[0]["metric"]["model_name"]
        deadline = time.monotonic() + 120
        empty = []
        for title, raw in VLLM_DASHBOARD:
            expr = raw.replace("$model_name", model).replace("$__rate_interval", RATE_INTERVAL)
            if _expected_empty(expr):
                assert not prom.query(expr), f"{expr} has data now: remove it from EXPECTED_EMPTY"
                continue
            if not has_data(poll(prom, expr, deadline)):
                empty.append(f"{title}: {expr}")
        assert not empty, "vLLM dashboard queries without data:\n  " + "\n  ".join(empty)


def test_expected_empty_names_series_the_dashboard_reads() -> None:
    # an entry no query uses would silence nothing
    for series in EXPECTED_EMPTY:
        assert any(series + "{" in expr for _, expr in VLLM_DASHBOARD), series
