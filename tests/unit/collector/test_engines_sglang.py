"""SGLang adapter: the real v0.5.10 capture and the tensor/data-parallel rank rule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo

TARGET = TargetInfo(url="http://sglang:30000/metrics", pod="qwen-0")


def _one(text: str) -> ReplicaSample:
    page = adapt_page(text, TARGET, 5.0)
    assert page.engine == "sglang"
    assert len(page.replicas) == 1
    return page.replicas[0]


def test_capture_values_read_off_the_page(metrics_fixtures: Path) -> None:
    r = _one((metrics_fixtures / "sglang__DataDog__integrations-core__sglang_metrics.txt").read_text())
    assert (r.model, r.requests_running, r.requests_waiting) == ("facebook/opt-125m", 0.0, 0.0)
    assert (r.kv_usage, r.kv_capacity_tokens) == (0.25, 430839.0)
    assert (r.prefix_queries, r.prefix_hits) == (5.0, 1.0)  # prompt_tokens_total, cached_tokens_total
    assert (r.prompt_tokens, r.generation_tokens, r.requests_finished) == (5.0, 32.0, 1.0)
    assert r.preemptions is None  # only the num_retracted_reqs gauge, no counter
    assert r.ttft is not None
    assert (r.ttft.bounds, r.ttft.counts, r.ttft.sum) == ((0.1, math.inf), (1.0, 1.0), 0.02)
    assert r.itl is not None
    assert r.itl.counts == (31.0, 31.0)
    assert r.e2e is not None
    assert r.e2e.sum == 0.07
    assert r.queue_time is not None
    assert r.queue_time.bounds == (0.001, math.inf)


_RANKS = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0",dp_rank="0"} 5
sglang:num_running_reqs{model_name="m",tp_rank="1",dp_rank="0"} 5
sglang:num_running_reqs{model_name="m",tp_rank="2",dp_rank="1"} 7
sglang:num_running_reqs{model_name="m",tp_rank="3",dp_rank="1"} 7
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",tp_rank="0",dp_rank="0"} 0.2
sglang:token_usage{model_name="m",tp_rank="1",dp_rank="0"} 0.2
sglang:token_usage{model_name="m",tp_rank="2",dp_rank="1"} 0.6
sglang:token_usage{model_name="m",tp_rank="3",dp_rank="1"} 0.6
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="m",tp_rank="0",dp_rank="0"} 3
sglang:num_retracted_requests_total{model_name="m",tp_rank="2",dp_rank="1"} 4
"""


def test_tp_ranks_counted_once_dp_ranks_summed() -> None:
    r = _one(_RANKS)
    assert r.requests_running == 12.0  # 5 (dp 0) + 7 (dp 1), TP duplicates dropped
    assert r.kv_usage == pytest.approx(0.4)  # mean over the two DP ranks
    assert r.preemptions == 7.0  # retraction counter, summed over DP ranks


@pytest.mark.parametrize(
    ("engine_type", "queue", "prefill_prealloc", "decode_prealloc", "waiting"),
    [
        # a decode worker's requests waiting for KV memory are its backlog: waiting queue + prealloc queue
        ("decode", 2, 0, 37, 39.0),
        # a prefill worker's prealloc (bootstrap) queue waits on the decode side: not its own backlog
        ("prefill", 3, 9, 0, 3.0),
        # a unified worker writes the disaggregation gauges as 0: its queue as before
        ("unified", 5, 0, 0, 5.0),
    ],
)
def test_decode_prealloc_queue_is_waiting(
    engine_type: str, queue: int, prefill_prealloc: int, decode_prealloc: int, waiting: float
) -> None:
    rank0 = f'{{engine_type="{engine_type}",model_name="m",tp_rank="0"}}'
    rank1 = rank0.replace('tp_rank="0"', 'tp_rank="1"')
    page = (
        f"sglang:num_queue_reqs{rank0} {queue}\n"
        f"sglang:num_prefill_prealloc_queue_reqs{rank0} {prefill_prealloc}\n"
        f"sglang:num_decode_prealloc_queue_reqs{rank0} {decode_prealloc}\n"
        # a second TP rank repeats the scheduler's state: counted once
        f"sglang:num_decode_prealloc_queue_reqs{rank1} {decode_prealloc}\n"
    )
    assert _one(page).requests_waiting == waiting


_PRIORITY = """# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",priority="",tp_rank="0"} 6
sglang:num_queue_reqs{model_name="m",priority="0",tp_rank="0"} 5
sglang:num_queue_reqs{model_name="m",priority="1",tp_rank="0"} 1
sglang:num_queue_reqs{model_name="m",priority="",tp_rank="1"} 6
sglang:num_queue_reqs{model_name="m",priority="0",tp_rank="1"} 5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",priority="",tp_rank="0"} 8
sglang:num_running_reqs{model_name="m",priority="1",tp_rank="0"} 8
# TYPE sglang:num_decode_prealloc_queue_reqs gauge
sglang:num_decode_prealloc_queue_reqs{model_name="m",priority="",tp_rank="0"} 2
sglang:num_decode_prealloc_queue_reqs{model_name="m",priority="1",tp_rank="0"} 2
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",priority="0"} 30
sglang:num_requests_total{model_name="m",priority="1"} 12
"""


@pytest.mark.parametrize(
    ("text", "waiting", "running", "finished"),
    [
        # the queue gauges' priority="" totals, once per TP rank; the per-request counter's priorities summed
        (_PRIORITY, 6.0 + 2.0, 8.0, 42.0),
        # only per-priority shares, no total beside them (not what SGLang writes): summed rather than lost
        (
            '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m",priority="0"} 5\n'
            'sglang:num_queue_reqs{model_name="m",priority="1"} 1\n',
            6.0,
            None,
            None,
        ),
    ],
)
def test_priority_shares_beside_the_total_are_not_added(
    text: str, waiting: float, running: float | None, finished: float | None
) -> None:
    r = _one(text)
    assert (r.requests_waiting, r.requests_running, r.requests_finished) == (waiting, running, finished)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=5),  # each priority's waiting share
    st.lists(st.integers(0, 50), min_size=1, max_size=5),  # each priority's running share
    st.lists(st.integers(0, 10**6), min_size=1, max_size=5),  # each priority's prompt tokens (tokenizer series)
)
def test_priority_shares_never_add_to_their_total(waiting: list[int], running: list[int], tokens: list[int]) -> None:
    def gauge(name: str, shares: list[int]) -> list[str]:
        lines = [f'sglang:{name}{{model_name="m",priority="",tp_rank="0"}} {sum(shares)}']
        return lines + [f'sglang:{name}{{model_name="m",priority="{p}",tp_rank="0"}} {v}' for p, v in enumerate(shares)]

    lines = ["# TYPE sglang:num_queue_reqs gauge", *gauge("num_queue_reqs", waiting)]
    lines += ["# TYPE sglang:num_running_reqs gauge", *gauge("num_running_reqs", running)]
    lines += ["# TYPE sglang:prompt_tokens_total counter"]
    lines += [f'sglang:prompt_tokens_total{{model_name="m",priority="{p}"}} {v}' for p, v in enumerate(tokens)]
    r = _one("\n".join(lines) + "\n")
    assert (r.requests_waiting, r.requests_running, r.prompt_tokens) == (sum(waiting), sum(running), sum(tokens))
