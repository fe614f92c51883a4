"""kvpilot run's planner: with a serving profile, the pools of a disaggregated deployment are sized per pool and
every other deployment as before; without one, the plain planner decides everything."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState
from kvpilot.runtime.cost import cost_config
from kvpilot.runtime.wiring import build_planner
from kvpilot.settings import SettingsError, load_settings
from scaler.planner import Planner
from scaler.pools import PooledPlanner

PROFILE = {"prefill_tokens_per_s": 40_000, "decode_step_s": 0.006, "decode_tokens_per_s": 20_000, "kv_tokens": 400_000}


def _state() -> FleetState:
    state = FleetState()
    for t in (0.0, 5.0, 10.0):
        samples = [
            ReplicaSample("llm", "chat", "p0", "n0", "vllm", "m", t, role="prefill", prompt_tokens=9000.0 * t),
            ReplicaSample("llm", "chat", "d0", "n1", "vllm", "m", t, role="decode", requests_running=50.0),
            ReplicaSample("llm", "solo", "s0", "n2", "vllm", "m", t, requests_waiting=0.0, requests_running=1.0),
        ]
        state.observe([replace(s, requests_finished=t) for s in samples], [], now=t)
    return state


def test_a_profile_makes_pools_plan_on_their_own_signals() -> None:
    planner = build_planner(load_settings(None, scaler={"default": {"profile": PROFILE}}))
    assert isinstance(planner, PooledPlanner)
    decisions = {d.deployment: d for d in planner.decide(_state(), 10.0)}
    assert sorted(decisions) == ["llm/chat@decode", "llm/chat@prefill", "llm/solo"]
    assert decisions["llm/chat@prefill"].message.startswith("prefill pool")
    assert decisions["llm/chat@decode"].forecast["signal_now"] == 50.0  # sequences, not requests/s
    assert "pool" not in decisions["llm/solo"].message


def test_without_a_profile_the_plain_planner_decides_every_key() -> None:
    assert isinstance(build_planner(load_settings(None)), Planner)


def test_per_pool_settings_reach_the_pooled_planner() -> None:
    # scaler.pools: decode on its own profile, cold start and bounds; prefill keeps the default's; the decode pool's
    # GPU type prices it in the cost model (after any cost.deployments entry)
    decode_profile = {**PROFILE, "kv_tokens": 900_000}
    settings = load_settings(
        None,
        scaler={
            "cold_start_s": 90.0,
            "default": {"profile": PROFILE, "max_replicas": 50},
            "pools": {
                "decode": {
                    "gpu_type": "H200",
                    "cold_start_s": 300.0,
                    "min_replicas": 2,
                    "max_replicas": 8,
                    "profile": decode_profile,
                }
            },
        },
    )
    planner = build_planner(settings)
    assert isinstance(planner, PooledPlanner)
    prefill, decode = planner.config.prefill, planner.config.decode
    assert (prefill.cold_start_s, prefill.policy.min_replicas, prefill.policy.max_replicas) == (90.0, 1, 50)
    assert (decode.cold_start_s, decode.policy.min_replicas, decode.policy.max_replicas) == (300.0, 2, 8)
    assert prefill.profile.kv_tokens == 400_000
    assert decode.profile.kv_tokens == 900_000
    cost = cost_config(settings, candidates=False)
    assert cost.for_deployment("llm/chat@decode").gpu_type == "H200"
    assert cost.for_deployment("llm/chat@prefill").gpu_type is None


def test_per_pool_settings_are_validated() -> None:
    with pytest.raises(SettingsError, match="exceeds max_replicas"):
        load_settings(None, scaler={"pools": {"prefill": {"min_replicas": 5, "max_replicas": 2}}})
    with pytest.raises(SettingsError, match=r"has no price in cost\.gpus"):
        load_settings(None, scaler={"pools": {"decode": {"gpu_type": "B300"}}})
    with pytest.raises(SettingsError, match="pools"):
        load_settings(None, scaler={"pools": {"both": {"cold_start_s": 10.0}}})
    # a pool with a profile of its own but none in the default: still sized per pool only when both pools have one
    solo = load_settings(None, scaler={"pools": {"decode": {"profile": PROFILE}}})
    assert isinstance(build_planner(solo), Planner)


@pytest.mark.parametrize(
    ("setting", "colocated", "pools"), [(None, True, False), (True, True, True), (False, False, False)]
)
def test_the_burst_floor_is_on_for_colocated_deployments_and_on_pools_only_where_set(
    setting: bool | None, colocated: bool, pools: bool
) -> None:
    # Since 2417015 the co-located default holds the burst floor (the measured service need); a pool's floor reads a
    # 30 s peak of prompt tokens, measured only as an option (docs/disaggregated.md): on where the setting says so.
    planner_settings = {} if setting is None else {"burst_floor": setting}
    settings = load_settings(None, scaler={"default": {"profile": PROFILE}, "planner": planner_settings})
    planner = build_planner(settings)
    assert isinstance(planner, PooledPlanner)
    assert isinstance(planner.inner, Planner)
    assert planner.inner.config.policy.burst_floor is colocated
    assert planner.config.prefill.policy.burst_floor is pools
    assert planner.config.decode.policy.burst_floor is pools
