"""One replica: continuous batching, chunked prefill, prefix hits, preemption, step-time model."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.profile import LLAMA3_8B_H100, ReplicaProfile
from simulator.replica import Replica
from simulator.trace import Request


def _run(profile: ReplicaProfile, requests: list[Request], until: float = 600.0) -> Replica:
    r = Replica("r", profile, now=0.0, ready_at=0.0)
    for req in requests:
        r.advance_to(req.arrival_s)
        r.submit(req, req.arrival_s)
    r.advance_to(until)
    return r


def test_lone_request_timing_follows_the_step_model() -> None:
    p = dataclasses.replace(LLAMA3_8B_H100, warmup_s=0.0)
    r = _run(p, [Request(0.0, 1000, 11)])
    (done,) = r.finished
    assert done.ttft_s == pytest.approx(p.step_time(1000, 0, 0))  # one prefill step
    decode = p.decode_steps_time(10, 1, 1001)  # then 10 decode steps over a growing context
    assert done.e2e_s == pytest.approx(done.ttft_s + decode)
    assert r.c.generation_tokens == 11
    assert r.c.prompt_tokens == 1000


def test_long_prompt_is_prefilled_in_chunks() -> None:
    p = dataclasses.replace(LLAMA3_8B_H100, warmup_s=0.0, max_num_batched_tokens=1024)
    r = _run(p, [Request(0.0, 4000, 2)])
    (done,) = r.finished
    chunks = [1024, 1024, 1024, 928]
    assert done.ttft_s == pytest.approx(sum(p.step_time(c, 0, 0) for c in chunks))


def test_batching_serves_concurrent_requests_faster_than_serially() -> None:
    p = dataclasses.replace(LLAMA3_8B_H100, warmup_s=0.0)
    reqs = [Request(0.0, 200, 200) for _ in range(32)]
    r = _run(p, reqs)
    batched = max(f.e2e_s for f in r.finished)
    serial = 32 * _run(p, reqs[:1]).finished[0].e2e_s
    assert len(r.finished) == 32
    assert batched < serial / 10


def test_max_num_seqs_caps_the_running_batch() -> None:
    p = dataclasses.replace(LLAMA3_8B_H100, max_num_seqs=4)
    r = Replica("r", p, now=0.0, ready_at=0.0)
    for _ in range(10):
        r.submit(Request(0.0, 100, 1000), 0.0)
    r.advance_to(0.5)
    assert len(r.running) == 4
    assert len(r.waiting) == 6


def test_shared_prefix_hits_second_time() -> None:
    blocks = (11, 12, 13)
    r = _run(LLAMA3_8B_H100, [Request(0.0, 1600, 5, blocks), Request(10.0, 1600, 5, blocks)])
    # First request: 1600 queried, 0 hit; second: 3 full blocks of 512 tokens hit.
    assert r.c.prefix_queries == 3200
    assert r.c.prefix_hits == 1536
    assert r.finished[1].ttft_s < r.finished[0].ttft_s


def test_full_pool_preempts_and_still_finishes_everything() -> None:
    # A pool of 400 blocks (6400 tokens) and eight requests that each grow to 1,500 tokens.
    tiny = dataclasses.replace(
        LLAMA3_8B_H100, weights_bytes=LLAMA3_8B_H100.gpu.memory_bytes * 0.9 - 4 * 1024**3 - 400 * 16 * 131072
    )
    assert tiny.num_gpu_blocks == 400
    r = _run(tiny, [Request(0.0, 500, 1000) for _ in range(8)], until=3600)
    assert r.c.preemptions > 0
    assert len(r.finished) == 8
    assert r.pool.private_blocks == 0  # everything given back


def test_warmup_slows_the_first_steps() -> None:
    cold = _run(LLAMA3_8B_H100, [Request(0.0, 1000, 2)]).finished[0].ttft_s
    warm = _run(dataclasses.replace(LLAMA3_8B_H100, warmup_s=0.0), [Request(0.0, 1000, 2)]).finished[0].ttft_s
    assert cold == pytest.approx(warm * LLAMA3_8B_H100.warmup_slowdown)


def test_hung_replica_makes_no_progress() -> None:
    r = Replica("r", LLAMA3_8B_H100, now=0.0, ready_at=0.0)
    r.hung = True
    r.submit(Request(0.0, 100, 10), 0.0)
    r.advance_to(100.0)
    assert not r.finished
    assert r.c.busy_s == 0
    assert r.load == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("block_size", 24),  # must divide the 512-token prefix block
        ("gpu_memory_utilization", 0.0),  # no memory at all
        ("weights_bytes", 10**12),  # weights larger than the GPU
        ("base_s", 0.0),  # a step cannot be free
    ],
)
def test_invalid_profiles_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match="invalid replica profile"):
        dataclasses.replace(LLAMA3_8B_H100, **{field: value})
