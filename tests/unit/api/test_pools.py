"""A disaggregated deployment in the API: one view per pool (``pool`` field, addressed as ``name@pool``), and
/metrics says which pool each deployment series belongs to."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient

from collector.samples import ReplicaSample
from collector.state import FleetState
from store.fields import is_deployment_key
from tests.unit.api.conftest import NOW, READ, FakeRuntime, auth

R = auth(READ)


POOLS = (("chat-p0", "prefill", 5.0), ("chat-p1", "prefill", 1.0), ("chat-d0", "decode", 0.0))


def _pooled_state() -> FleetState:
    state = FleetState()
    for t in (NOW - 30, NOW):
        samples = [
            ReplicaSample("llm", "chat", name, "n0", "vllm", "llama", t, requests_waiting=waiting, role=role)
            for name, role, waiting in (
                ("chat-p0", "prefill", 5.0),
                ("chat-p1", "prefill", 1.0),
                ("chat-d0", "decode", 0.0),
            )
        ]
        state.observe(samples, [], now=t)
    return state


def test_pools_are_deployments_of_their_own(client: TestClient, runtime: FakeRuntime) -> None:
    state = _pooled_state()
    assert runtime.snap is not None
    runtime.snap = replace(runtime.snap, deployments=state.deployments(), replicas=state.replicas())
    listed = {d["key"]: d for d in client.get("/v1/deployments", headers=R).json()["items"]}
    prefill = listed["llm/chat@prefill"]
    assert (prefill["name"], prefill["pool"], prefill["replicas"], prefill["requests_waiting"]) == (
        "chat",
        "prefill",
        2,
        6,
    )
    assert listed["llm/chat@decode"]["pool"] == "decode"
    detail = client.get("/v1/deployments/llm/chat@decode", headers=R)
    assert detail.status_code == 200, detail.text
    assert [r["replica"] for r in detail.json()["replicas"]] == ["chat-d0"]
    assert client.get("/v1/deployments/llm/chat@encode", headers=R).status_code == 422  # not a pool
    text = client.get("/metrics").text
    assert 'kvpilot_deployment_pool_info{deployment="llm/chat@prefill",pool="prefill"} 1.0' in text
    assert 'kvpilot_deployment_requests_waiting{deployment="llm/chat@prefill"} 6.0' in text


def test_a_pools_stored_decision_is_published_again() -> None:
    # after a restart the decisions restored from the store are published only for valid keys: pools are
    assert is_deployment_key("llm/chat@prefill")
    assert not is_deployment_key("llm/chat@encode")
