"""Dashboards per pool (issue 14): every dashboard's deployment picker offers each pool of a disaggregated deployment
(``llm/chat@prefill``, ``llm/chat@decode``), because the series it takes its values from carry the pool's key on
kvpilot's /metrics once the pools are watched, decided and priced."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from dashboards.definitions import DASHBOARDS
from scaler.cost import CostConfig, GpuAssignment, fleet_costs
from scaler.planner import Planner
from scaler.pools import PooledPlanner
from tests.unit.api.conftest import FakeRuntime
from tests.unit.scaler.test_pools import CONFIG, _Pools

PICKERS = [
    (name, variable.query)
    for name, build in DASHBOARDS.items()
    for variable in build().variables
    if variable.name == "deployment"
]


@pytest.mark.parametrize(("dashboard", "query"), PICKERS)
def test_the_deployment_picker_lists_each_pool(
    client: TestClient, runtime: FakeRuntime, dashboard: str, query: str
) -> None:
    pools = _Pools()
    planner = PooledPlanner(Planner(), CONFIG)
    for _ in range(30):
        pools.tick(prompt_rate=20_000, req_rate=10, prefill_waiting=0, decode_running=100)
    decisions = {d.deployment: d for d in planner.decide(pools.state, pools.t)}
    views = pools.state.deployments()
    config = CostConfig(default=GpuAssignment("H100", 1), pools={"decode": GpuAssignment("H200")})
    assert runtime.snap is not None
    runtime.snap = replace(
        runtime.snap, deployments=views, replicas=pools.state.replicas(), decisions=decisions,
        costs=fleet_costs(views, config),
    )  # fmt: skip
    text = client.get("/metrics").text
    (series,) = re.findall(r"label_values\((\w+)", query)
    listed = set(re.findall(rf'^{series}{{[^}}]*deployment="([^"]+)"', text, re.M))
    assert {"llm/chat@prefill", "llm/chat@decode"} <= listed, (dashboard, series)
