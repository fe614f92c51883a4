"""A real Prometheus discovers the live simulator through /sd and the vLLM project's own Grafana queries render.

The PromQL below is copied from vLLM's dashboard, examples/online_serving/prometheus_grafana/grafana.json
(vllm-project/vllm, Apache-2.0), with `$model_name` and `$__rate_interval` substituted.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator import Fleet, FleetConfig, load_trace
from simulator.server import LiveFleet, make_server
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"

# (panel title in grafana.json, expr)
GRAFANA_VLLM = [
    ("E2E Request Latency",
     'histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}'
     "[$__rate_interval])))"),
    ("Token Throughput", 'rate(vllm:prompt_tokens_total{model_name="$model_name"}[$__rate_interval])'),
    ("Token Throughput", 'rate(vllm:generation_tokens_total{model_name="$model_name"}[$__rate_interval])'),
    ("Time Per Output Token Latency",
     'histogram_quantile(0.99, sum by(le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="$model_name"}'
     "[$__rate_interval])))"),
    ("Scheduler State", 'vllm:num_requests_running{model_name="$model_name"}'),
    ("Scheduler State", 'vllm:num_requests_waiting{model_name="$model_name"}'),
    ("Time To First Token Latency",
     'histogram_quantile(0.5, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="$model_name"}'
     "[$__rate_interval])))"),
    ("Time To First Token Latency",
     'rate(vllm:time_to_first_token_seconds_sum{model_name="$model_name"}[$__rate_interval])\n/\n'
     'rate(vllm:time_to_first_token_seconds_count{model_name="$model_name"}[$__rate_interval])'),
    ("Cache Utilization", 'vllm:gpu_cache_usage_perc{model_name="$model_name"}'),
    ("Request Prompt Length",
     'sum by(le) (increase(vllm:request_prompt_tokens_bucket{model_name="$model_name"}[$__rate_interval]))'),
    ("Request Generation Length",
     'sum by(le) (increase(vllm:request_generation_tokens_bucket{model_name="$model_name"}[$__rate_interval]))'),
    ("Finish Reason",
     'sum by(finished_reason) (increase(vllm:request_success_total{model_name="$model_name"}[$__rate_interval]))'),
    ("Queue Time", 'rate(vllm:request_queue_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Requests Prefill and Decode Time",
     'rate(vllm:request_prefill_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Requests Prefill and Decode Time",
     'rate(vllm:request_decode_time_seconds_sum{model_name="$model_name"}[$__rate_interval])'),
    ("Max Generation Token in Sequence Group",
     'rate(vllm:request_max_num_generation_tokens_sum{model_name="$model_name"}[$__rate_interval])'),
]  # fmt: skip


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    trace = load_trace("synthetic:duration_s=7200,rate=6,amplitude=0", seed=1)
    live = LiveFleet(Fleet(FleetConfig(replicas=2), trace), engine="vllm", speed=5.0)
    server = make_server(live)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    live.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    live.stop()
    server.shutdown()


def test_vllm_grafana_dashboard_queries_return_data(live_url: str, tmp_path: Path) -> None:
    sd = {"job_name": "simulator", "http_sd_configs": [{"url": f"{live_url}/sd", "refresh_interval": "1s"}]}
    with run_prometheus(tmp_path, scrape_configs=[sd]) as prom:
        prom.wait_for('count(up{job="simulator"} == 1) >= 3', timeout_s=60)
        for title, expr in GRAFANA_VLLM:
            promql = expr.replace("$model_name", MODEL).replace("$__rate_interval", "10s")
            result = prom.wait_for(promql, timeout_s=60)
            assert result, f"panel {title!r}: no data for {promql}"
        # Discovery labels from /sd reach the series.
        pods = prom.query('group by (pod, node, kind) (vllm:num_requests_running{namespace="inference"})')
        assert {r["metric"]["pod"] for r in pods} == {"llama-0000", "llama-0001"}
        gpus = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{Hostname="node-0", pod="llama-0000"}')
        assert gpus[0]["metric"]["UUID"].startswith("GPU-")
