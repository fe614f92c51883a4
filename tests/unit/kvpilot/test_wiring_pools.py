"""kvpilot run's planner: with a serving profile, the pools of a disaggregated deployment are sized per pool and
every other deployment as before; without one, the plain planner decides everything."""

from __future__ import annotations

from dataclasses import replace

from collector.samples import ReplicaSample
from collector.state import FleetState
from kvpilot.settings import load_settings
from kvpilot.wiring import build_planner
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
