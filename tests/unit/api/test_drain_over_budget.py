"""An operator's audited approval past drains.budget (review G round 10): the budget binds kvpilot's own approval,
an admin may approve past it with ``{"over_budget": true}``, never past drains.max_concurrent. Real SQLite store
through the API."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.unit.api.conftest import ADMIN, FakeRuntime, auth

A = auth(ADMIN)


def _request(client: TestClient, node: str) -> int:
    r = client.post("/v1/drains", json={"node": node, "reason": "xid 79"}, headers=A)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_an_admin_approves_past_the_budget_only_when_asked_and_it_is_audited(
    client: TestClient, runtime: FakeRuntime
) -> None:
    runtime.drain_budget, runtime.drain_max_concurrent = 1, 2
    first, second, third = (_request(client, n) for n in ("node-0", "node-1", "node-2"))
    assert client.post(f"/v1/drains/{first}/approve", json={}, headers=A).status_code == 200

    refused = client.post(f"/v1/drains/{second}/approve", json={"message": "bad day"}, headers=A)
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert "drains.budget" in detail  # the setting
    assert '"over_budget": true' in detail  # and the override
    assert client.get(f"/v1/drains/{second}", headers=A).json()["state"] == "requested"

    r = client.post(f"/v1/drains/{second}/approve", json={"over_budget": True, "message": "bad day"}, headers=A)
    assert r.status_code == 200, r.text
    approved = r.json()
    assert approved["state"] == "approved"
    event = approved["events"][-1]
    assert (event["to_state"], event["actor"]) == ("approved", "admin#0")
    assert event["message"].startswith("approved over drains.budget: 1 drain(s)")
    assert event["message"].endswith("the budget is 1; bad day")
    stored = client.get(f"/v1/drains/{second}", headers=A).json()["events"][-1]
    assert stored == event  # in the store, not only in the answer

    # max_concurrent (2 approved) still refuses, override or not
    r = client.post(f"/v1/drains/{third}/approve", json={"over_budget": True}, headers=A)
    assert r.status_code == 409
    assert "drains.max_concurrent" in r.json()["detail"]
    assert client.get(f"/v1/drains/{third}", headers=A).json()["state"] == "requested"


def test_over_budget_within_the_budget_is_a_plain_approval(client: TestClient, runtime: FakeRuntime) -> None:
    runtime.drain_budget = 1
    action = _request(client, "node-0")
    r = client.post(f"/v1/drains/{action}/approve", json={"over_budget": True}, headers=A)
    assert r.status_code == 200
    assert r.json()["events"][-1]["message"] == ""  # nothing was overridden, nothing to audit as such


def test_over_budget_is_a_boolean(client: TestClient) -> None:
    action = _request(client, "node-0")
    r = client.post(f"/v1/drains/{action}/approve", json={"over_budget": "please"}, headers=A)
    assert r.status_code == 422
