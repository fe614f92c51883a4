"""The metrics-api JSON endpoint (KEDA `metrics-api` trigger), on its own FastAPI app with the API's real auth."""

from __future__ import annotations

import math
from dataclasses import replace
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from api import errors
from api.auth import TokenAuth
from api.routers.metrics_api import router
from collector.clock import VirtualClock
from scaler.keda.reader import DecisionReader
from scaler.publish import DecisionBoard
from tests.unit.scaler.keda.harness import NOW, decision, hpa_replicas

TOKEN = "k" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Fleet:
    """What `kvpilot run` hands the route: the loop's decision board and clock, read through one DecisionReader."""

    def __init__(self) -> None:
        self.board = DecisionBoard()
        self.clock = VirtualClock(NOW)


def make_client(fleet: Fleet, stale_after_s: float = 60, *, reader: bool = True) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.include_router(router)
    app.state.auth = TokenAuth((TOKEN,), (), anonymous_read=False)
    if reader:
        app.state.keda_reader = DecisionReader(fleet.board, fleet.clock, stale_after_s)
    return TestClient(app)


@pytest.fixture
def fleet() -> Fleet:
    f = Fleet()
    f.board.publish(decision("llm/chat", desired=5, warm=2))
    return f


def test_body_drives_the_hpa_to_the_decided_replicas(fleet: Fleet) -> None:
    fleet.clock.advance(4)
    body = make_client(fleet).get("/v1/keda/llm/chat", headers=AUTH).json()
    assert body["deployment"] == "llm/chat"
    assert (body["replicas"], body["desiredReplicas"], body["warmPool"]) == (7, 7, 2)  # warm pool inside desired
    assert body["arrivalRate"] == 4.5
    assert body["ageSeconds"] == 4
    # valueLocation "replicas" with targetValue "1": the HPA asks for ceil(7 / 1) = 7
    assert hpa_replicas(float(body["replicas"]), 1.0) == 7


STATUS_CASES = [
    # a deployment without a decision: 404 naming it
    ("/v1/keda/llm/code", AUTH, 404, "no decision for deployment llm/code"),
    # upper case is not a Kubernetes namespace: refused before any lookup
    ("/v1/keda/LLM/chat", AUTH, 422, "pattern"),
    # a namespace longer than 63 characters
    ("/v1/keda/" + "a" * 64 + "/chat", AUTH, 422, "63"),
    # a path with an extra segment does not match the route
    ("/v1/keda/llm/chat/extra", AUTH, 404, "Not Found"),
    # no token: like every read of the API, 401
    ("/v1/keda/llm/chat", {}, 401, ""),
    # a wrong token
    ("/v1/keda/llm/chat", {"Authorization": "Bearer " + "x" * 24}, 401, ""),
]


@pytest.mark.parametrize(("path", "headers", "status", "detail"), STATUS_CASES)
def test_status_codes(fleet: Fleet, path: str, headers: dict[str, str], status: int, detail: str):
    response = make_client(fleet).get(path, headers=headers)
    assert response.status_code == status
    assert detail in response.text


def test_stale_decision_is_503_so_keda_fallback_applies(fleet: Fleet) -> None:
    fleet.clock.advance(61)
    response = make_client(fleet, stale_after_s=60).get("/v1/keda/llm/chat", headers=AUTH)
    assert response.status_code == 503
    assert "61 s old" in response.json()["detail"]


def test_staleness_check_can_be_disabled(fleet: Fleet) -> None:
    fleet.clock.advance(10_000)
    assert make_client(fleet, stale_after_s=0).get("/v1/keda/llm/chat", headers=AUTH).status_code == 200


def test_without_a_reader_is_404(fleet: Fleet) -> None:
    # an app `kvpilot run` did not wire (no decision reader) has no decision to give (after auth)
    assert make_client(fleet, reader=False).get("/v1/keda/llm/chat", headers=AUTH).status_code == 404
    assert make_client(fleet, reader=False).get("/v1/keda/llm/chat").status_code == 401


def test_non_finite_forecast_values_are_left_out(fleet: Fleet) -> None:
    forecast = {"arrival_rate": math.nan, "queue": math.inf, "horizon_s": 150.0}
    fleet.board.publish(replace(decision("llm/chat"), forecast=forecast))
    body = make_client(fleet).get("/v1/keda/llm/chat", headers=AUTH).json()
    assert body["arrivalRate"] is None
    assert body["forecast"] == {"horizon_s": 150.0}


@settings(max_examples=80, deadline=None)
@given(namespace=st.text(min_size=1, max_size=70), name=st.text(min_size=1, max_size=70))
def test_fuzzed_paths_never_500(namespace: str, name: str) -> None:
    fleet = Fleet()
    fleet.board.publish(decision("llm/chat"))
    client = make_client(fleet)
    response = client.get(f"/v1/keda/{quote(namespace, safe='')}/{quote(name, safe='')}", headers=AUTH)
    assert response.status_code in {200, 404, 405, 422}
