"""Cost in the API: the deployment view carries it (with the advisory options), /v1/cost totals the fleet and
lists deployments whose GPU type is unknown, and /metrics exports it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from scaler.cost import Candidate, CostConfig, GpuAssignment, GpuPrice, fleet_costs
from tests.unit.api.conftest import READ, FakeRuntime, auth
from tests.unit.scaler.test_cost import _profile

R = auth(READ)


def _with_costs(runtime: FakeRuntime, config: CostConfig) -> None:
    snap = runtime.snap
    assert snap is not None
    runtime.snap = replace(snap, costs=fleet_costs(snap.deployments, config))


def test_deployment_view_and_fleet_total(client: TestClient, runtime: FakeRuntime) -> None:
    # llm/chat: two replicas, a priced type in settings, and "llama" profiled on two types
    config = CostConfig(
        gpus={"H100": GpuPrice(2.5, 700), "SLOW": GpuPrice(0.5, 100)},
        deployments={"llm/chat": GpuAssignment("H100", 2)},
        candidates={"llama": (Candidate("H100", 2, _profile(1.0)), Candidate("SLOW", 1, _profile(0.5)))},
    )
    _with_costs(runtime, config)
    body = client.get("/v1/deployments/llm/chat", headers=R).json()
    cost = body["deployment"]["cost"]
    assert (cost["gpu_type"], cost["gpu_type_source"], cost["gpus_per_replica"]) == ("H100", "settings", 2)
    assert cost["usd_per_hour"] == pytest.approx(2 * 2 * 2.5)
    assert cost["usd_per_million_tokens"] is not None
    assert cost["problem"] is None
    rec = cost["recommendation"]
    assert rec["recommended"]["gpu_type"] == "SLOW"
    assert "advisory" in rec["message"]
    assert {o["gpu_type"] for o in rec["options"]} == {"H100", "SLOW"}
    listed = client.get("/v1/deployments", headers=R).json()["items"]
    assert listed[0]["cost"]["usd_per_hour"] == pytest.approx(10.0)
    fleet = client.get("/v1/cost", headers=R).json()
    assert fleet["usd_per_hour"] == pytest.approx(10.0)
    assert fleet["power_w"] == pytest.approx(4 * 700)
    assert fleet["unknown"] == []
    assert set(fleet["deployments"]) == {"llm/chat"}
    text = client.get("/metrics").text
    assert 'kvpilot_cost_usd_per_hour{deployment="llm/chat",gpu_type="H100",pool=""} 10.0' in text
    assert 'kvpilot_cost_gpus{deployment="llm/chat",gpu_type="H100",pool=""} 4.0' in text
    assert 'kvpilot_cost_option_usd_per_hour{deployment="llm/chat",gpu_type="SLOW",meets_slo="true",pool=""}' in text


def test_unknown_gpu_type_is_said_not_priced(client: TestClient, runtime: FakeRuntime) -> None:
    # the fixture's exporter names the GPU "H100"; with only an A100 priced, nothing matches
    _with_costs(runtime, CostConfig(gpus={"A100": GpuPrice(1.0, 400)}))
    cost = client.get("/v1/deployments/llm/chat", headers=R).json()["deployment"]["cost"]
    assert cost["usd_per_hour"] is None
    assert cost["gpu_type"] is None
    assert "GPU type unknown for llm/chat" in cost["problem"]
    fleet = client.get("/v1/cost", headers=R).json()
    assert fleet["unknown"] == ["llm/chat"]
    assert fleet["usd_per_hour"] == 0.0
    assert "kvpilot_cost_usd_per_hour" not in client.get("/metrics").text  # absent, not 0


def test_cost_needs_a_reader(client: TestClient) -> None:
    assert client.get("/v1/cost").status_code == 401
