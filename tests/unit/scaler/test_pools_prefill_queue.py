"""The prefill pool's TTFT term (issue 14, "prefill sized on prompt-token arrival forecast and TTFT"): prompts
already waiting are demand now, drained over the larger of the TTFT target and the pool's horizon, on top of the
prompt tokens that keep arriving; decode is not moved by prefill's queue."""

from __future__ import annotations

import math

from scaler.planner import Planner
from scaler.pools import PooledPlanner
from tests.unit.scaler.test_pools import CONFIG, H100, _desired, _Pools

STEADY = {"prompt_rate": 20_000, "req_rate": 10, "decode_running": 100}  # 2,000-token prompts


def _after(waiting: float) -> dict[str, int]:
    planner = PooledPlanner(Planner(), CONFIG)
    pools = _Pools()
    for _ in range(60):  # five quiet minutes
        pools.tick(prefill_waiting=0, **STEADY)
    for _ in range(3):  # then the same arrivals with prompts queued on prefill
        pools.tick(prefill_waiting=waiting, **STEADY)
    return _desired(planner, pools)


def test_prompts_waiting_grow_prefill_by_what_draining_them_needs() -> None:
    quiet, queued = _after(0), _after(12_000)
    # 12,000 prompts x 2,000 tokens drained over prefill's 95 s horizon: ~253k tokens/s on top of 20k arriving
    drain_s = max(CONFIG.ttft_target_s, CONFIG.prefill.horizon_s)
    need = (20_000 + 12_000 * 2_000 / drain_s) / (H100.prefill_tokens_per_s * CONFIG.prefill.policy.target_utilisation)
    assert queued["llm/chat@prefill"] >= math.ceil(need) > quiet["llm/chat@prefill"]
    assert queued["llm/chat@decode"] == quiet["llm/chat@decode"]
