"""Adapters for NIM, MindIE, TensorRT-LLM's PyTorch backend and Dynamo, on the series the fixture pages do not carry."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.engines import UnknownEngine
from collector.samples import ReplicaSample, TargetInfo

TARGET = TargetInfo(url="http://10.0.0.9:8000/metrics", pod="p-0")


def _one(text: str, engine: str) -> ReplicaSample:
    page = adapt_page(text, TARGET, 0.0)
    assert page.engine == engine
    (replica,) = page.replicas
    return replica


_TRTLLM_ITERATION = """# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{model_name="q",engine_type="trtllm"} 6
trtllm_num_requests_running{model_name="q",engine_type="trtllm"} 30
trtllm_kv_cache_max_blocks{model_name="q",engine_type="trtllm"} 1000
trtllm_kv_cache_used_blocks{model_name="q",engine_type="trtllm"} 250
trtllm_kv_cache_tokens_per_block{model_name="q",engine_type="trtllm"} 32
# TYPE trtllm_kv_cache_reused_blocks_total counter
trtllm_kv_cache_reused_blocks_total{model_name="q",engine_type="trtllm"} 40
# TYPE trtllm_kv_cache_missed_blocks_total counter
trtllm_kv_cache_missed_blocks_total{model_name="q",engine_type="trtllm"} 60
# TYPE trtllm_prompt_tokens_total counter
trtllm_prompt_tokens_total{model_name="q",engine_type="trtllm"} 9000
"""


def test_trtllm_pytorch_iteration_series() -> None:
    r = _one(_TRTLLM_ITERATION, "trtllm-pytorch")
    assert (r.requests_waiting, r.requests_running) == (6.0, 30.0)
    assert r.kv_capacity_tokens == 1000 * 32  # max blocks x tokens per block
    assert r.kv_usage == 0.25  # no utilization gauge: used / max blocks
    assert (r.prefix_hits, r.prefix_queries) == (40 * 32, (40 + 60) * 32)  # blocks to tokens
    assert r.prompt_tokens == 9000.0


def test_trtllm_pytorch_utilization_gauge_wins_over_block_counts() -> None:
    page = _TRTLLM_ITERATION + 'trtllm_kv_cache_utilization{model_name="q",engine_type="trtllm"} 0.4\n'
    assert _one(page, "trtllm-pytorch").kv_usage == 0.4


def test_dynamo_worker_without_engine_series() -> None:
    page = (
        'dynamo_component_requests_total{dynamo_component="backend",model="m"} 12\n'
        'dynamo_component_inflight_requests{dynamo_component="backend",model="m"} 3\n'
        'dynamo_component_kvstats_gpu_cache_usage_percent{dynamo_component="backend",model="m"} 0.6\n'
    )
    r = _one(page, "dynamo")
    assert (r.model, r.requests_finished, r.kv_usage) == ("m", 12.0, 0.6)  # older kvstats_ name still read
    assert r.requests_waiting is None  # a worker's page has no frontend queue: unknown, not 0
    assert r.requests_running is None


def test_dynamo_frontend_running_needs_both_gauges() -> None:
    # in-flight alone would count queued requests as running too
    r = _one('dynamo_frontend_inflight_requests{model="m"} 9\n', "dynamo")
    assert (r.requests_waiting, r.requests_running) == (None, None)


def test_dynamo_frontend_nothing_in_flight_is_nothing_queued() -> None:
    # the queue is a subset of in flight: with 0 in flight both are 0, queue gauge or not (AIPerf's real page)
    r = _one('dynamo_frontend_inflight_requests{model="m"} 0\n', "dynamo")
    assert (r.requests_waiting, r.requests_running) == (0.0, 0.0)


def test_dynamo_frontend_active_requests_is_in_flight_under_its_later_name() -> None:
    page = 'dynamo_frontend_queued_requests{model="m"} 2\ndynamo_frontend_active_requests{model="m"} 7\n'
    assert (_one(page, "dynamo").requests_waiting, _one(page, "dynamo").requests_running) == (2.0, 5.0)
    both = page + 'dynamo_frontend_inflight_requests{model="m"} 9\n'
    assert _one(both, "dynamo").requests_running == 7.0  # inflight_requests first, as Dynamo still writes it


# Dynamo's frontend after its deprecated gauges go (its metrics guide, "Deprecated frontend gauges": queued_requests
# "will be removed in a future release", its count is the sum of stage_requests over preprocess, route and dispatch)
_STAGES = (
    'dynamo_frontend_stage_requests{phase="",stage="preprocess"} 1\n'
    'dynamo_frontend_stage_requests{phase="aggregated",stage="route"} 2\n'
    'dynamo_frontend_stage_requests{phase="aggregated",stage="dispatch"} 4\n'
)


def test_dynamo_frontend_queue_is_its_stages_before_the_first_token() -> None:
    # before: queue and running both unknown with 12 in flight and no queued_requests
    page = 'dynamo_frontend_active_requests{model="m"} 12\n' + _STAGES
    r = _one(page, "dynamo")
    assert (r.requests_waiting, r.requests_running) == (7.0, 5.0)
    # a later stage (after the first token) is not queued
    later = page + 'dynamo_frontend_stage_requests{phase="aggregated",stage="postprocess"} 3\n'
    assert _one(later, "dynamo").requests_waiting == 7.0
    # where the release still writes the queue gauge, it wins
    both = page + 'dynamo_frontend_queued_requests{model="m"} 6\n'
    assert (_one(both, "dynamo").requests_waiting, _one(both, "dynamo").requests_running) == (6.0, 6.0)


def test_dynamo_frontend_stages_of_several_models_are_no_model_s_queue() -> None:
    # stage_requests has no model label: with two models it cannot be split, so neither model reads the whole
    page = (
        'dynamo_frontend_active_requests{model="a"} 12\ndynamo_frontend_active_requests{model="b"} 3\n'
        'dynamo_frontend_requests_total{model="a"} 50\ndynamo_frontend_requests_total{model="b"} 9\n' + _STAGES
    )
    replicas = adapt_page(page, TARGET, 0.0).replicas
    assert sorted(r.model or "" for r in replicas) == ["a", "b"]
    assert [(r.requests_waiting, r.requests_running) for r in replicas] == [(None, None), (None, None)]
    # a model whose queue gauge is written keeps it
    queued = page + 'dynamo_frontend_queued_requests{model="a"} 4\ndynamo_frontend_queued_requests{model="b"} 1\n'
    by_model = {r.model: (r.requests_waiting, r.requests_running) for r in adapt_page(queued, TARGET, 0.0).replicas}
    assert by_model == {"a": (4.0, 8.0), "b": (1.0, 2.0)}


def test_dynamo_frontend_success_count_is_not_every_finished_request() -> None:
    # successes only: read as finished, failed requests under overload would make arrivals read low
    page = (
        'dynamo_frontend_inflight_requests{model="m"} 0\n'
        "# TYPE dynamo_frontend_request_success_count counter\n"
        'dynamo_frontend_request_success_count{model="m"} 170\n'
    )
    assert _one(page, "dynamo").requests_finished is None


def _frontend(cached_count: int, inflight: int) -> str:
    return (
        f'dynamo_frontend_queued_requests{{model="m"}} 0\ndynamo_frontend_inflight_requests{{model="m"}} {inflight}\n'
        "# TYPE dynamo_frontend_input_sequence_tokens histogram\n"
        'dynamo_frontend_input_sequence_tokens_sum{model="m"} 10000\n'
        'dynamo_frontend_input_sequence_tokens_count{model="m"} 10\n'
        "# TYPE dynamo_frontend_cached_tokens histogram\n"
        'dynamo_frontend_cached_tokens_sum{model="m"} 4000\n'
        f'dynamo_frontend_cached_tokens_count{{model="m"}} {cached_count}\n'
    )


@pytest.mark.parametrize(
    ("cached_count", "inflight", "prefix"),
    [
        # every request reported its cached tokens: hits and lookups in tokens
        (10, 0, (10000.0, 4000.0)),
        # two still in flight past their first token without a count yet: as many as it can be
        (8, 2, (10000.0, 4000.0)),
        # requests answered without a cached count (an engine that reports none for some): no rate rather than
        # one that counts their prompt tokens as misses
        (6, 2, (None, None)),
    ],
)
def test_dynamo_frontend_prefix_from_cached_tokens(
    cached_count: int, inflight: int, prefix: tuple[object, ...]
) -> None:
    r = _one(_frontend(cached_count, inflight), "dynamo")
    assert (r.prefix_queries, r.prefix_hits) == prefix


@pytest.mark.parametrize(
    ("page", "finished"),
    [
        # request_finish_total (every reason) first
        (
            'num_requests_running{model_name="m"} 1\nrequest_finish_total{model_name="m",finished_reason="stop"} 7\n'
            'request_success_total{model_name="m"} 5\n',
            7.0,
        ),
        # older NIM: request_success_total only
        ('num_requests_running{model_name="m"} 1\nrequest_success_total{model_name="m"} 5\n', 5.0),
    ],
)
def test_nim_finished_requests(page: str, finished: float) -> None:
    assert _one(page, "nim").requests_finished == finished


_MINDIE = """# TYPE request_received_total counter
request_received_total{model_name="m"} 20
# TYPE request_success_total counter
request_success_total{model_name="m"} 10
# TYPE request_failed_total counter
request_failed_total{model_name="m"} 3
num_requests_running{model_name="m"} 4
num_requests_waiting{model_name="m"} 2
npu_cache_usage_perc{model_name="m"} 0.35
npu_prefix_cache_hit_rate{model_name="m"} 0.5
"""


def test_mindie_reads_its_npu_cache_gauge_and_counts_failed_requests_as_finished() -> None:
    # MindIE writes NIM's unprefixed vLLM names beside its own: read as NIM, its KV gauge (npu_cache_usage_perc) was
    # lost and a failed request (request_failed_total, apart from request_success_total) never finished
    r = _one(_MINDIE, "mindie")
    assert (r.requests_running, r.requests_waiting, r.kv_usage) == (4.0, 2.0, 0.35)
    assert r.requests_finished == 13.0
    assert (r.prefix_queries, r.prefix_hits) == (None, None)  # the hit-rate gauge is no pair of counters
    assert _one(_MINDIE.replace("request_failed_total", "other_total"), "mindie").requests_finished == 10.0


def test_unprefixed_vllm_names_alone_stay_nim() -> None:
    # the names MindIE shares with NIM do not identify MindIE: such a page reads as before, as NIM
    page = 'num_requests_running{model_name="m"} 1\nnum_requests_waiting{model_name="m"} 0\n'
    page += 'request_success_total{model_name="m"} 5\n'
    r = _one(page, "nim")
    assert (r.requests_running, r.requests_finished) == (1.0, 5.0)


def test_engine_mindie_on_a_nim_page_is_an_error(metrics_fixtures: Path) -> None:
    nim = (metrics_fixtures / "nim__DataDog__integrations-core__nim_metrics.txt").read_bytes()
    with pytest.raises(UnknownEngine, match="none of the mindie families"):
        adapt_page(nim, TARGET, 0.0, engine="mindie")


def test_trtllm_pytorch_older_dynamo_spelling() -> None:
    # older Dynamo wrote trtllm:<name>; read like trtllm_<name>
    page = _TRTLLM_ITERATION.replace("trtllm_", "trtllm:")
    r = _one(page, "trtllm-pytorch")
    assert (r.requests_waiting, r.kv_capacity_tokens, r.prefix_hits) == (6.0, 32000, 1280)


def test_pytrtllm_namespace_is_tensorrt_llm_not_nim() -> None:
    # TensorRT-LLM PR #5560's proposed /metrics wrote `pytrtllm:<name>`; the prefix search used to cut `pytrtllm:` off
    # and read NIM's bare names (engine nim, no finished count). A typed copy reads the same.
    page = (
        'pytrtllm:num_requests_running{model_name="m"} 2.0\n'
        'pytrtllm:num_requests_waiting{model_name="m"} 1.0\n'
        'pytrtllm:prompt_tokens_total{model_name="m"} 100.0\n'
        'pytrtllm:request_completed_total{model_name="m"} 7.0\n'
    )
    for text in (page, "# TYPE pytrtllm:num_requests_running gauge\n" + page):
        r = _one(text, "trtllm-pytorch")
        assert (r.requests_running, r.requests_waiting, r.prompt_tokens, r.requests_finished) == (2.0, 1.0, 100.0, 7.0)
    # request_success_total, where a page has it, comes first
    both = page + 'pytrtllm:request_success_total{model_name="m",finished_reason="stop"} 6.0\n'
    assert _one(both, "trtllm-pytorch").requests_finished == 6.0
