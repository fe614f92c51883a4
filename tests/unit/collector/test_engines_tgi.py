"""TGI adapter: the real (partial) capture, and the derived KV usage and token counters."""

from __future__ import annotations

import math
from pathlib import Path

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo

TARGET = TargetInfo(url="http://tgi:8080/metrics", pod="tgi-0")


def _one(text: str) -> ReplicaSample:
    page = adapt_page(text, TARGET, 5.0)
    assert page.engine == "tgi"
    assert len(page.replicas) == 1
    return page.replicas[0]


def test_capture_values_read_off_the_page(metrics_fixtures: Path) -> None:
    r = _one((metrics_fixtures / "tgi__DataDog__integrations-core__payload__partial.txt").read_text())
    assert (r.model, r.requests_waiting, r.requests_running, r.requests_finished) == (None, 0.0, 0.0, 109.0)
    assert r.prompt_tokens == 662.0  # tgi_request_input_length_sum
    # cut before tgi_batch_max_total_tokens and tgi_request_generated_tokens: unknown, not 0
    assert (r.kv_usage, r.kv_capacity_tokens, r.generation_tokens) == (None, None, None)
    assert (r.prefix_queries, r.prefix_hits, r.preemptions, r.ttft) == (None, None, None, None)


_FULL = """# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 30000
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 120000
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="100"} 3
tgi_request_generated_tokens_bucket{le="+Inf"} 5
tgi_request_generated_tokens_sum 910
tgi_request_generated_tokens_count 5
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="0.5"} 1
tgi_request_duration_bucket{le="2"} 4
tgi_request_duration_bucket{le="+Inf"} 5
tgi_request_duration_sum 6.5
tgi_request_duration_count 5
"""


def test_kv_usage_is_reserved_share_of_token_budget() -> None:
    r = _one(_FULL)
    assert (r.requests_waiting, r.requests_running) == (4.0, 16.0)
    assert (r.kv_usage, r.kv_capacity_tokens) == (0.25, 120000.0)  # 30000 / 120000
    assert r.generation_tokens == 910.0
    assert r.e2e is not None
    assert (r.e2e.bounds, r.e2e.counts) == ((0.5, 2.0, math.inf), (1.0, 4.0, 5.0))
