"""A disaggregated deployment's cost and forecast error, per pool, where an operator reads them (issue 14): the pools'
own GPU types priced apart on /metrics (``pool`` label) and in the API, and each pool planner's live forecast error
exported under the pool's key."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from scaler.cost import CostConfig, GpuAssignment, fleet_costs
from scaler.planner import Planner
from scaler.pools import PooledPlanner
from tests.unit.api.conftest import READ, FakeRuntime, auth
from tests.unit.api.test_pools import _pooled_state
from tests.unit.scaler.test_pools import CONFIG, _Pools

R = auth(READ)


def test_each_pool_is_priced_on_its_own_gpu_type(client: TestClient, runtime: FakeRuntime) -> None:
    # llm/chat: two prefill replicas and one decode replica; decode on H200 by the pools' settings, the rest H100
    state = _pooled_state()
    config = CostConfig(default=GpuAssignment("H100", 1), pools={"decode": GpuAssignment("H200")})
    assert runtime.snap is not None
    deployments = state.deployments()
    runtime.snap = replace(
        runtime.snap, deployments=deployments, replicas=state.replicas(), costs=fleet_costs(deployments, config)
    )
    text = client.get("/metrics").text
    assert 'kvpilot_cost_usd_per_hour{deployment="llm/chat@prefill",gpu_type="H100",pool="prefill"} 5.38' in text
    assert 'kvpilot_cost_usd_per_hour{deployment="llm/chat@decode",gpu_type="H200",pool="decode"} 3.59' in text
    assert 'kvpilot_cost_power_watts{deployment="llm/chat@decode",gpu_type="H200",pool="decode"} 700.0' in text
    decode = client.get("/v1/deployments/llm/chat@decode", headers=R).json()["deployment"]["cost"]
    assert (decode["gpu_type"], decode["usd_per_hour"]) == ("H200", pytest.approx(3.59))
    fleet = client.get("/v1/cost", headers=R).json()
    assert set(fleet["deployments"]) == {"llm/chat@prefill", "llm/chat@decode"}
    assert fleet["usd_per_hour"] == pytest.approx(2 * 2.69 + 3.59)


def test_each_pool_exports_its_own_forecast_error(client: TestClient, runtime: FakeRuntime) -> None:
    # Holt on both pools (a naive forecaster's error is 1 by the measure's definition, whatever it forecasts)
    holt = replace(
        CONFIG, prefill=replace(CONFIG.prefill, forecaster="holt"), decode=replace(CONFIG.decode, forecaster="holt")
    )
    planner = PooledPlanner(Planner(), holt)
    pools = _Pools()
    for i in range(80):  # decided every tick: each pool's error is scored one horizon later, on its own signal
        # prompts rising steadily; sequences on decode swinging by 40 every four ticks
        pools.tick(prompt_rate=20_000 + 100 * i, req_rate=10, prefill_waiting=0, decode_running=100 + 40 * (i % 4))
        decisions = {d.deployment: d for d in planner.decide(pools.state, pools.t)}
    assert runtime.snap is not None
    runtime.snap = replace(runtime.snap, decisions=decisions)
    text = client.get("/metrics").text
    for pool in ("prefill", "decode"):
        mase = decisions[f"llm/chat@{pool}"].forecast["mase_holt"]
        assert f'kvpilot_forecast_error_mase{{deployment="llm/chat@{pool}",model="holt"}} {mase}' in text
    # each pool's error is its own signal's (prompt tokens/s, sequences), not one deployment-wide figure
    assert decisions["llm/chat@prefill"].forecast["mase_holt"] != decisions["llm/chat@decode"].forecast["mase_holt"]
