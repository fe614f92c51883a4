"""The metrics-api JSON endpoint (KEDA `metrics-api` trigger), on its own FastAPI app."""

from __future__ import annotations

import math
from dataclasses import replace
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from api.routers.metrics_api import router
from collector.clock import VirtualClock
from scaler.publish import DecisionBoard
from tests.unit.scaler.test_keda_harness import NOW, decision, hpa_replicas


@pytest.fixture
def app() -> FastAPI:
    app = FastAPI()
    app.include_router(router)
    app.state.decision_source = DecisionBoard()
    app.state.clock = VirtualClock(NOW)
    app.state.decision_stale_after_s = 60
    return app


def test_body_drives_the_hpa_to_the_decided_replicas(app: FastAPI) -> None:
    app.state.decision_source.publish(decision("llm/chat", desired=5, warm=2))
    app.state.clock.advance(4)
    body = TestClient(app).get("/v1/keda/llm/chat").json()
    assert body["deployment"] == "llm/chat"
    assert (body["replicas"], body["desiredReplicas"], body["warmPool"]) == (7, 5, 2)
    assert body["arrivalRate"] == 4.5
    assert body["ageSeconds"] == 4
    # valueLocation "replicas" with targetValue "1": the HPA asks for ceil(7 / 1) = 7
    assert hpa_replicas(float(body["replicas"]), 1.0) == 7


STATUS_CASES = [
    # a deployment without a decision: 404 naming it
    ("/v1/keda/llm/code", 404, "no decision for deployment llm/code"),
    # upper case is not a Kubernetes namespace: refused before any lookup
    ("/v1/keda/LLM/chat", 422, "pattern"),
    # a namespace longer than 63 characters
    ("/v1/keda/" + "a" * 64 + "/chat", 422, "63"),
    # a path with an extra segment does not match the route
    ("/v1/keda/llm/chat/extra", 404, "Not Found"),
]


@pytest.mark.parametrize(("path", "status", "detail"), STATUS_CASES)
def test_status_codes(app: FastAPI, path: str, status: int, detail: str) -> None:
    app.state.decision_source.publish(decision("llm/chat"))
    response = TestClient(app).get(path)
    assert response.status_code == status
    assert detail in response.text


def test_stale_decision_is_503_so_keda_fallback_applies(app: FastAPI) -> None:
    app.state.decision_source.publish(decision("llm/chat"))
    app.state.clock.advance(61)
    response = TestClient(app).get("/v1/keda/llm/chat")
    assert response.status_code == 503
    assert "61 s old" in response.json()["detail"]


def test_unwired_source_is_503(app: FastAPI) -> None:
    del app.state.decision_source
    assert TestClient(app).get("/v1/keda/llm/chat").status_code == 503


def test_non_finite_forecast_values_are_left_out(app: FastAPI) -> None:
    bad = replace(decision("llm/chat"), forecast={"arrival_rate": math.nan, "queue": math.inf, "horizon_s": 150.0})
    app.state.decision_source.publish(bad)
    body = TestClient(app).get("/v1/keda/llm/chat").json()
    assert body["arrivalRate"] is None
    assert body["forecast"] == {"horizon_s": 150.0}


@settings(max_examples=80, deadline=None)
@given(namespace=st.text(min_size=1, max_size=70), name=st.text(min_size=1, max_size=70))
def test_fuzzed_paths_never_500(namespace: str, name: str) -> None:
    app = FastAPI()
    app.include_router(router)
    board = DecisionBoard()
    board.publish(decision("llm/chat"))
    app.state.decision_source = board
    app.state.clock = VirtualClock(NOW)
    response = TestClient(app).get(f"/v1/keda/{quote(namespace, safe='')}/{quote(name, safe='')}")
    assert response.status_code in {200, 404, 405, 422}
