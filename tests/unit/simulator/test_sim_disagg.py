"""A disaggregated deployment in the simulator: prefill hands KV to decode over a link, decode admits by its KV pool,
each pool on its own GPU type, and both render the engine's real metrics (read back by kvpilot's adapter)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collector.adapt import adapt_page
from collector.samples import TargetInfo
from simulator.calibration import LLAMA3_8B
from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.exposition import render_replica
from simulator.profile import PROFILES
from simulator.trace.model import RequestColumns, Trace

H100, H200 = PROFILES["llama3-8b-h100"], PROFILES["llama3-8b-h200"]


def _trace(n: int = 120, prompt: int = 2000, output: int = 64, every_s: float = 0.25) -> Trace:
    cols = RequestColumns(
        np.arange(n, dtype=np.float64) * every_s,
        np.full(n, prompt, np.int64),
        np.full(n, output, np.int64),
        [()] * n,
    )
    return Trace("synthetic", n * every_s, _columns=cols)


def _fleet(trace: Trace, *, link: float = 50e9, decode_profile=H200, decode: int = 2) -> DisaggregatedFleet:
    cfg = DisaggConfig(
        prefill=FleetConfig(profile=H100, replicas=2, cold_start_s=60, routing="least_loaded"),
        decode=FleetConfig(profile=decode_profile, replicas=decode, cold_start_s=180, routing="least_loaded"),
        link_bytes_per_s=link,
    )
    return DisaggregatedFleet(cfg, trace)


def test_every_request_crosses_the_link_once_and_finishes_with_its_output() -> None:
    trace = _trace()
    fleet = _fleet(trace)
    fleet.advance_to(trace.duration_s + 120)
    done = fleet.finished()
    assert len(done) == 120
    assert {f.output_tokens for f in done} == {64}
    assert fleet.transfers.count == 120
    # KV bytes from the model's shape: 2 x 32 layers x 8 KV heads x 128 x 2 bytes per token
    assert fleet.transfers.bytes_total == 120 * 2000 * LLAMA3_8B.kv_bytes_per_token
    prefill, decode = fleet.snapshots()["prefill"], fleet.snapshots()["decode"]
    assert sum(r.generation_tokens_total for r in prefill.replicas) == 120  # prefill makes one token a request
    # decode makes every output token (prefill's one is not sent on: vLLM's P/D prefill request has max_tokens=1)
    assert sum(r.generation_tokens_total for r in decode.replicas) == 120 * 64
    assert all(f.ttft_s > 0 and f.e2e_s >= f.ttft_s for f in done)


def test_a_slow_link_delays_the_first_token_by_the_transfer() -> None:
    trace = _trace(n=20, every_s=2.0)  # no queueing: the difference is the link alone
    fast, slow = _fleet(trace, link=1e12), _fleet(trace, link=1e9)
    for f in (fast, slow):
        f.advance_to(trace.duration_s + 60)
    transfer_s = 2000 * LLAMA3_8B.kv_bytes_per_token / 1e9  # 0.26 s per prompt on a 1 GB/s link
    gap = np.mean([s.ttft_s for s in slow.finished()]) - np.mean([f.ttft_s for f in fast.finished()])
    assert gap == pytest.approx(transfer_s, rel=0.1)


def test_decode_admission_waits_for_kv_blocks() -> None:
    # a decode pool with room for ~7 prompts of 2000 tokens: the rest wait on decode while prefill keeps up
    small = dataclasses.replace(H100, gpu_memory_utilization=0.26)
    blocks_per_prompt = 2000 // small.block_size + 1
    fleet = _fleet(_trace(n=200, output=2000, every_s=0.05), decode_profile=small, decode=1)
    fleet.advance_to(8.0)
    (decode,) = fleet.snapshots()["decode"].replicas
    assert decode.requests_waiting > 0
    assert decode.requests_running * blocks_per_prompt <= small.num_gpu_blocks
    assert decode.kv_usage > 0.8
    assert sum(r.requests_waiting for r in fleet.snapshots()["prefill"].replicas) <= 2  # prefill is not the limit


def test_pools_run_their_own_gpus_and_cold_starts() -> None:
    fleet = _fleet(_trace(n=10))
    fleet.set_replicas(prefill=3, decode=3)
    fleet.advance_to(90.0)  # the prefill pool's 60 s cold start is over, the decode pool's 180 s is not
    snaps = fleet.snapshots()
    assert [r.state for r in snaps["prefill"].replicas].count("ready") == 3
    assert [r.state for r in snaps["decode"].replicas].count("loading") == 1
    assert {g.model_name for g in snaps["prefill"].gpus} == {H100.gpu.name}
    assert {g.model_name for g in snaps["decode"].gpus} == {H200.gpu.name}
    assert set(fleet.roles().values()) == {"prefill", "decode"}


def test_each_role_renders_real_vllm_metrics_kvpilot_reads() -> None:
    fleet = _fleet(_trace(n=40))
    fleet.advance_to(5.0)
    roles = fleet.roles()
    for role, snap in fleet.snapshots().items():
        for r in snap.replicas:
            target = TargetInfo(
                url=f"http://{r.name}/metrics", namespace="llm", deployment="llama", pod=r.name, role=roles[r.name]
            )
            (sample,) = adapt_page(render_replica(r, "vllm"), target, 5.0).replicas
            assert sample.engine == "vllm"
            assert sample.deployment_key == f"llm/llama@{role}"
            assert sample.kv_capacity_tokens == r.kv_capacity_tokens


def test_config_refuses_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="link_bytes_per_s must be > 0"):
        DisaggConfig(FleetConfig(), FleetConfig(), link_bytes_per_s=0)
    with pytest.raises(ValueError, match="serve different models"):
        DisaggConfig(FleetConfig(), FleetConfig(profile=PROFILES["llama2-7b-h100"]))
