"""Every endpoint's behaviour: contents, filters, pagination, unknown ids, malformed bodies, size limits."""

from __future__ import annotations

import logging
import math

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import sessionmaker

from api import schemas, series
from collector.state import SIGNALS
from store import repo
from store.db import make_engine, transaction
from tests.unit.api.conftest import ADMIN, FINDING, NOW, READ, TARGET, FakeRuntime, auth

R = auth(READ)
A = auth(ADMIN)


def test_deployments_list_and_detail(client: TestClient) -> None:
    page = client.get("/v1/deployments", headers=R).json()
    assert page["total"] == 1
    (d,) = page["items"]
    assert (d["key"], d["live"], d["ready_replicas"], d["desired_replicas"]) == ("llm/chat", True, 2, 3)
    detail = client.get("/v1/deployments/llm/chat", headers=R).json()
    assert detail["decision"]["reason"] == "predictive"
    assert detail["decision"]["forecast"]["arrival_rate"] == 4.0
    assert [r["replica"] for r in detail["replicas"]] == ["chat-0", "chat-1"]
    assert [f["id"] for f in detail["findings"]] == [FINDING.id]


def test_a_deployment_shows_every_signal_the_collector_aggregates(client: TestClient, runtime: FakeRuntime) -> None:
    # One list (collector.state.DeploymentSignals) from the view to the API: a signal added there and not here fails
    assert set(SIGNALS) <= set(schemas.DeploymentSummary.model_fields)
    (d,) = client.get("/v1/deployments", headers=R).json()["items"]
    assert runtime.snap is not None
    view = runtime.snap.deployments["llm/chat"]
    for name in SIGNALS:
        shown, held = d[name], getattr(view, name)
        assert shown == (None if held is None or not math.isfinite(held) else pytest.approx(held)), name
    assert view.arrival_rate is not None  # the fixture's fleet shows values, not only Nones
    assert view.kv_usage_max is not None


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/deployments/llm/nope", 404),  # unknown deployment
        ("/v1/deployments/llm/bad%20name", 422),  # not a Kubernetes name
        ("/v1/deployments/llm", 404),  # missing the name part
    ],
)
def test_deployment_unknown_or_malformed(client: TestClient, path: str, status: int) -> None:
    r = client.get(path, headers=R)
    assert r.status_code == status
    assert r.json()["detail"]


@pytest.mark.parametrize(
    ("query", "replicas"),
    [
        ("", ["chat-0", "chat-1"]),  # all
        ("?deployment=llm/chat&node=node-1", ["chat-1"]),  # filters combine
        ("?deployment=other/x", []),  # an unknown deployment is an empty list, not an error
        ("?limit=1&offset=1", ["chat-1"]),  # pagination
    ],
)
def test_replicas(client: TestClient, query: str, replicas: list[str]) -> None:
    body = client.get(f"/v1/replicas{query}", headers=R).json()
    assert [r["replica"] for r in body["items"]] == replicas


@pytest.mark.parametrize(
    "query",
    [
        "?limit=0",  # empty pages are refused
        "?limit=1001",  # beyond the maximum page
        "?offset=-1",  # negative offset
        "?limit=abc",  # not a number
    ],
)
def test_pagination_is_validated(client: TestClient, query: str) -> None:
    assert client.get(f"/v1/decisions{query}", headers=R).status_code == 422


def test_page_shape(client: TestClient) -> None:
    body = client.get("/v1/replicas?limit=1", headers=R).json()
    assert (body["total"], body["limit"], body["offset"], body["next_offset"]) == (2, 1, 0, 1)


def test_gpus(client: TestClient) -> None:
    (g,) = client.get("/v1/gpus?node=node-0&present=true", headers=R).json()["items"]
    assert (g["uuid"], g["last_xid"], g["xid_class"], g["replica"]) == ("GPU-0", 79, "drain", "llm/chat-0")
    assert client.get("/v1/gpus?node=elsewhere", headers=R).json()["total"] == 0


def test_targets_add_list_remove(client: TestClient) -> None:
    new = {"url": "http://10.0.0.9:8000/metrics", "namespace": "llm", "deployment": "chat"}
    assert client.post("/v1/targets", json=new, headers=A).status_code == 201
    assert client.post("/v1/targets", json=new, headers=A).status_code == 200  # idempotent
    items = {t["url"]: t for t in client.get("/v1/targets", headers=R).json()["items"]}
    assert items[new["url"]]["static"] is True
    assert items[TARGET.url]["up"] is False  # health from the latest tick
    assert items[TARGET.url]["last_error"] == "timed out after 2 s"
    assert items[TARGET.url]["partial_pages_total"] == 0
    assert client.delete("/v1/targets", params={"url": new["url"]}, headers=A).status_code == 204
    r = client.delete("/v1/targets", params={"url": new["url"]}, headers=A)
    assert r.status_code == 404
    assert "not found" in r.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {"url": "ftp://x/metrics"},  # not http(s)
        {"url": "http://a b/metrics"},  # spaces
        {"url": "http://10.0.0.1/metrics", "kind": "disk"},  # unknown kind
        {"url": "http://10.0.0.1/metrics", "surprise": 1},  # unknown field
        {"url": "http://10.0.0.1/metrics", "namespace": "Not_A_Namespace"},  # not a Kubernetes namespace
        {},  # url missing
        [],  # not an object
    ],
)
def test_targets_malformed_bodies(client: TestClient, body: object) -> None:
    r = client.post("/v1/targets", json=body, headers=A)
    assert r.status_code == 422
    assert r.json()["detail"]


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b'{"node": "node-0"}', {"Content-Type": "application/x-www-form-urlencoded"}),  # curl -d without -H
        (b"", {}),  # no body at all
    ],
)
def test_a_body_that_is_not_json_says_what_to_send(client: TestClient, content: bytes, headers: dict[str, str]) -> None:
    # was 'Input should be a valid dictionary or object to extract fields from' / 'Field required', naming no fix
    r = client.post("/v1/drains", content=content, headers={**A, **headers})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body"]
    assert "send a JSON object with Content-Type: application/json" in error["msg"]


def test_invalid_json_is_422(client: TestClient) -> None:
    r = client.post("/v1/drains", content=b"{not json", headers={**A, "Content-Type": "application/json"})
    assert r.status_code == 422


def test_an_acknowledgement_is_logged_with_who_made_it(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    # docs/api.md: every change is logged with who made it, as targets and drains are (an acknowledgement was not)
    caplog.set_level(logging.INFO, logger="api.routers.findings")
    r = client.post(f"/v1/findings/{FINDING.id}/acknowledge", json={"note": "replacing GPU"}, headers=A)
    assert r.status_code == 200
    assert f"audit: admin#0 acknowledged finding {FINDING.id}" in caplog.text


def test_findings_filter_get_acknowledge(client: TestClient) -> None:
    assert client.get("/v1/findings?state=open&kind=stuck_gpu", headers=R).json()["total"] == 1
    assert client.get("/v1/findings?severity=info", headers=R).json()["total"] == 0
    assert client.get("/v1/findings?state=bogus", headers=R).status_code == 422
    got = client.get(f"/v1/findings/{FINDING.id}", headers=R).json()
    assert got["evidence"] == {"xid": 79.0}
    r = client.post(f"/v1/findings/{FINDING.id}/acknowledge", json={"note": "replacing GPU"}, headers=A)
    assert r.status_code == 200
    body = r.json()
    assert (body["state"], body["acknowledged_by"], body["acknowledge_note"]) == (
        "acknowledged",
        "admin#0",
        "replacing GPU",
    )


@pytest.mark.parametrize(
    ("finding_id", "status"),
    [
        ("0123456789abcdef", 404),  # well-formed, unknown
        ("not-an-id", 422),  # malformed id
        ("0123456789ABCDEF", 422),  # ids are lower-case hex
    ],
)
def test_finding_unknown_or_malformed(client: TestClient, finding_id: str, status: int) -> None:
    assert client.get(f"/v1/findings/{finding_id}", headers=R).status_code == status
    assert client.post(f"/v1/findings/{finding_id}/acknowledge", json={}, headers=A).status_code == status


def test_decisions(client: TestClient) -> None:
    (d,) = client.get("/v1/decisions?deployment=llm/chat", headers=R).json()["items"]
    assert (d["desired_replicas"], d["warm_pool"], d["message"]) == (3, 1, "forecast rises")
    assert client.get(f"/v1/decisions?since={NOW + 1}", headers=R).json()["items"] == []
    assert client.get("/v1/decisions?reason=reactive", headers=R).json() == {
        "items": [],
        "limit": 100,
        "next_cursor": None,
    }


def test_drain_lifecycle(client: TestClient) -> None:
    r = client.post("/v1/drains", json={"node": "node-0", "reason": "xid 79"}, headers=A)
    assert r.status_code == 201
    action = r.json()
    assert (action["state"], action["dry_run"], action["requested_by"]) == ("requested", True, "admin#0")
    again = client.post("/v1/drains", json={"node": "node-0"}, headers=A).json()
    assert again["id"] == action["id"]  # one live drain per node
    approved = client.post(f"/v1/drains/{action['id']}/approve", json={}, headers=A).json()
    assert approved["state"] == "approved"
    other = client.post("/v1/drains", json={"node": "node-1"}, headers=A).json()
    r = client.post(f"/v1/drains/{other['id']}/approve", json={}, headers=A)
    assert r.status_code == 409  # max_concurrent = 1
    assert "max_concurrent" in r.json()["detail"]
    cancelled = client.post(f"/v1/drains/{action['id']}/cancel", json={"message": "false alarm"}, headers=A).json()
    assert [e["to_state"] for e in cancelled["events"]] == ["requested", "approved", "cancelled"]
    r = client.post(f"/v1/drains/{action['id']}/approve", json={}, headers=A)
    assert r.status_code == 409  # cancelled is final
    assert "cancelled" in r.json()["detail"]
    assert client.get("/v1/drains?state=cancelled", headers=R).json()["total"] == 1
    assert client.get(f"/v1/drains/{action['id']}", headers=R).json()["state"] == "cancelled"


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/v1/drains/999", None, 404),  # unknown id
        ("POST", "/v1/drains/999/approve", {}, 404),  # unknown id
        ("POST", "/v1/drains/999/cancel", {}, 404),  # unknown id
        ("GET", "/v1/drains/0", None, 422),  # ids start at 1
        ("GET", "/v1/drains/abc", None, 422),  # not an id
        ("POST", "/v1/drains", {"node": ""}, 422),  # empty node
        ("POST", "/v1/drains", {"node": "a b"}, 422),  # not a node name
        ("POST", "/v1/drains", {"nodes": "a"}, 422),  # wrong field
        ("POST", "/v1/drains", {"node": 7}, 422),  # wrong type
        ("GET", "/v1/drains?state=bogus", None, 422),  # unknown state
    ],
)
def test_drains_errors(client: TestClient, method: str, path: str, body: object, status: int) -> None:
    r = client.request(method, path, json=body, headers=A)
    assert r.status_code == status, r.text


def test_body_size_limit(client: TestClient) -> None:
    big = {"node": "n1", "reason": "x" * 5000}  # the test runtime allows 4096 bytes
    r = client.post("/v1/drains", json=big, headers=A)
    assert r.status_code == 413
    assert "exceeds" in r.json()["detail"]

    def chunks():
        yield b'{"node": "n1", "reason": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    r = client.post("/v1/drains", content=chunks(), headers={**A, "Content-Type": "application/json"})
    assert r.status_code == 413  # no Content-Length: counted as it arrives


@pytest.mark.parametrize(
    ("changes", "status", "failing"),
    [
        ({}, 200, []),  # ticked and the store answers
        ({"first_tick_done": False}, 503, ["first_tick_done"]),  # nothing true to say yet
        ({"store_up": False, "store_pending_writes": 12}, 503, ["store_reachable"]),  # store away
        ({"keda_serving": True}, 200, []),  # KEDA's own process serves
        ({"keda_serving": False}, 503, ["keda_serving"]),  # KEDA's own process died and is not back yet
    ],
)
def test_readyz(client: TestClient, runtime: FakeRuntime, changes: dict, status: int, failing: list[str]) -> None:
    runtime.set_health(**changes)
    r = client.get("/readyz")
    assert r.status_code == status
    body = r.json()
    assert [k for k, ok in body["checks"].items() if not ok] == failing
    assert body["store_pending_writes"] == changes.get("store_pending_writes", 0)


def test_store_unavailable_is_503_with_a_body(runtime: FakeRuntime, tmp_path) -> None:
    (tmp_path / "gone").mkdir()
    runtime.sessions = sessionmaker(make_engine(f"sqlite:///{tmp_path / 'gone'}"))
    from tests.unit.api.conftest import make_client

    client = make_client(runtime)
    r = client.get("/v1/findings", headers=R)
    assert r.status_code == 503
    assert "store" in r.json()["detail"]
    assert client.get("/v1/replicas", headers=R).status_code == 200  # live state is still served


def test_metrics_exports_the_catalogue(client: TestClient, runtime: FakeRuntime) -> None:
    runtime.counters.decisions.labels("llm/chat", "predictive").inc()
    runtime.counters.tick_seconds.observe(0.2)
    text = client.get("/metrics").text
    expected = [
        'kvpilot_replica_kv_usage_ratio{deployment="llm/chat",engine="vllm",replica="chat-1"} 0.95',
        'kvpilot_deployment_arrival_rate{deployment="llm/chat"} 4.0',
        'kvpilot_deployment_tokens_rate{deployment="llm/chat",direction="generation"} 10.0',
        'kvpilot_deployment_replicas{deployment="llm/chat",state="ready"} 2.0',
        'kvpilot_desired_replicas{deployment="llm/chat"} 3.0',
        'kvpilot_forecast_error_mase{deployment="llm/chat",model="holt"} 0.8',
        'kvpilot_kv_time_to_exhaustion_seconds{deployment="llm/chat",replica="chat-1"} 42.0',
        'kvpilot_finding_active{deployment="llm/chat",gpu="GPU-0",kind="stuck_gpu",node="node-0",replica="",'
        'severity="critical"} 1.0',
        'kvpilot_gpu_last_xid{gpu="GPU-0",node="node-0",xid_class="drain"} 79.0',
        'kvpilot_node_drain_state{node="node-0",state="requested"} 1.0',
        f'kvpilot_scrape_up{{target="{TARGET.url}"}} 0.0',
        f'kvpilot_scrape_partial_pages_total{{target="{TARGET.url}"}} 0.0',  # from 0: increase() sees the first
        "kvpilot_store_up 1.0",
        'kvpilot_decisions_total{deployment="llm/chat",reason="predictive"} 1.0',
        "kvpilot_loop_tick_seconds_count 1.0",
    ]
    for line in expected:
        assert line in text, line
    assert "NaN" not in text  # unknown values are absent, not NaN
    for s in series.ALL:
        assert s.name.startswith("kvpilot_")


def test_metrics_of_gone_replicas_disappear(client: TestClient, runtime: FakeRuntime) -> None:
    # Gauges are rendered from the latest tick: a replica that left the fleet leaves no stale series behind.
    from dataclasses import replace

    assert 'replica="chat-1"' in client.get("/metrics").text
    snap = runtime.snap
    assert snap is not None
    runtime.snap = replace(
        snap, replicas=[r for r in snap.replicas if r.sample.replica != "chat-1"], kv_time_to_exhaustion={}
    )
    assert 'replica="chat-1"' not in client.get("/metrics").text


def test_removing_a_discovered_target_says_where_to_remove_it(client: TestClient) -> None:
    # TARGET is in the latest tick (from discovery: a static_file, Kubernetes, PromQL), not added through the API;
    # its DELETE said only "static target '...' not found" while GET /v1/targets listed it
    r = client.delete("/v1/targets", params={"url": TARGET.url}, headers=A)
    assert r.status_code == 404
    assert "one found by discovery (collector.discovery: a static_file" in r.json()["detail"]
    assert "static_targets" not in r.json()["detail"]  # the configuration's are not removed here: a 409 says so


def test_api_targets_persist_and_config_targets_are_pinned(runtime: FakeRuntime) -> None:
    from kvpilot.runtime.targets import StaticTargets
    from tests.unit.api.conftest import make_client

    pinned = TARGET
    runtime.targets = StaticTargets([pinned], sessions=runtime.sessions)
    client = make_client(runtime)
    new = {"url": "http://10.0.0.9:8000/metrics", "deployment": "chat"}
    assert client.post("/v1/targets", json=new, headers=A).status_code == 201
    r = client.delete("/v1/targets", params={"url": pinned.url}, headers=A)
    assert r.status_code == 409  # from the configuration: change the file, not the API
    assert "configuration" in r.json()["detail"]
    restarted = StaticTargets([pinned], sessions=runtime.sessions)
    assert restarted.load() == 1  # the API-added target is back after a restart
    assert {t.url for t in restarted.static_targets()} == {pinned.url, new["url"]}
    assert client.delete("/v1/targets", params={"url": new["url"]}, headers=A).status_code == 204
    assert StaticTargets(sessions=runtime.sessions).load() == 0  # and its removal persisted too


def test_deployment_history(client: TestClient) -> None:
    body = client.get("/v1/deployments/llm/chat/history", headers=R).json()
    assert [p["samples"] for p in body["items"]] == [1, 2]  # two minutes, the second folded from two ticks
    assert body["items"][1]["values"]["arrival_rate"] == 5.0  # the minute's mean
    later = client.get(f"/v1/deployments/llm/chat/history?since={NOW - 60}", headers=R).json()
    assert later["total"] == 1
    assert client.get("/v1/deployments/llm/nope/history", headers=R).status_code == 404


def test_history_of_a_deployment_only_a_gateway_counted(client: TestClient, runtime: FakeRuntime) -> None:
    """At zero replicas, never seen by the collector, a deployment decided on a gateway's counter (collector.arrivals)
    has minutes and no deployment row: its history is served (it was 404)."""
    with transaction(runtime.sessions) as s:
        repo.record_rollup(session=s, deployment="llm/asleep", t=NOW, signals={"planner_arrival_rate": 3.0})
    body = client.get("/v1/deployments/llm/asleep/history", headers=R).json()
    assert [p["values"]["planner_arrival_rate"] for p in body["items"]] == [3.0]
    assert client.get(f"/v1/deployments/llm/asleep/history?since={NOW + 120}", headers=R).json()["total"] == 0


def test_stage_errors_start_at_zero_and_not_filling_kv_is_inf(client: TestClient, runtime: FakeRuntime) -> None:
    # Every stage's error counter exists from the start (absent would read as "unknown"), and a replica whose KV
    # cache is not filling exports +Inf seconds to exhaustion (so `< threshold` alerts stay silent), never NaN.
    from dataclasses import replace

    snap = runtime.snap
    assert snap is not None
    runtime.snap = replace(
        snap, kv_time_to_exhaustion={("llm/chat", "chat-0"): math.inf, ("llm/chat", "chat-1"): math.nan}
    )
    text = client.get("/metrics").text
    for stage in series.LOOP_STAGES:
        assert f'kvpilot_loop_stage_errors_total{{stage="{stage}"}} 0.0' in text
    assert 'kvpilot_kv_time_to_exhaustion_seconds{deployment="llm/chat",replica="chat-0"} +Inf' in text
    assert 'replica="chat-1"} NaN' not in text


def test_a_target_naming_the_pod_of_another_is_refused(client: TestClient) -> None:
    # session 30 E: taken (201), and the two pages were read as one replica, its counters from each page in turn
    first = {"url": "http://10.0.0.9:8000/metrics", "namespace": "llm", "deployment": "chat", "pod": "chat-9"}
    assert client.post("/v1/targets", json=first, headers=A).status_code == 201
    r = client.post("/v1/targets", json={**first, "url": "http://10.0.0.10:8000/metrics"}, headers=A)
    assert r.status_code == 409
    assert r.json()["detail"].startswith("pod llm/chat-9 is already http://10.0.0.9:8000/metrics's (another URL)")
    urls = {t["url"] for t in client.get("/v1/targets", headers=R).json()["items"]}
    assert "http://10.0.0.10:8000/metrics" not in urls
    # the same pod name in another namespace is another replica
    other = {**first, "url": "http://10.0.0.11:8000/metrics", "namespace": "llm2"}
    assert client.post("/v1/targets", json=other, headers=A).status_code == 201
