"""The metrics-api JSON endpoint (KEDA `metrics-api` trigger), on its own FastAPI app with the API's real auth."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from api import errors
from api.auth import TokenAuth
from api.routers.metrics_api import router
from api.runtime import Snapshot
from scaler.decision import Decision
from tests.unit.scaler.test_keda_harness import NOW, decision, hpa_replicas

TOKEN = "k" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class DecisionsRuntime:
    """The two things the endpoint reads from the running service: the current snapshot and the time."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    t: float = NOW
    started: bool = True

    def snapshot(self) -> Snapshot | None:
        return Snapshot(tick=1, t=self.t, decisions=dict(self.decisions)) if self.started else None

    def now(self) -> float:
        return self.t


def make_client(runtime: DecisionsRuntime, stale_after_s: float = 60) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.include_router(router)
    app.state.runtime = runtime
    app.state.auth = TokenAuth((TOKEN,), (), anonymous_read=False)
    app.state.decision_stale_after_s = stale_after_s
    return TestClient(app)


@pytest.fixture
def runtime() -> DecisionsRuntime:
    return DecisionsRuntime({"llm/chat": decision("llm/chat", desired=5, warm=2)})


def test_body_drives_the_hpa_to_the_decided_replicas(runtime: DecisionsRuntime) -> None:
    runtime.t += 4
    body = make_client(runtime).get("/v1/keda/llm/chat", headers=AUTH).json()
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
def test_status_codes(runtime: DecisionsRuntime, path: str, headers: dict[str, str], status: int, detail: str):
    response = make_client(runtime).get(path, headers=headers)
    assert response.status_code == status
    assert detail in response.text


def test_stale_decision_is_503_so_keda_fallback_applies(runtime: DecisionsRuntime) -> None:
    runtime.t += 61
    response = make_client(runtime, stale_after_s=60).get("/v1/keda/llm/chat", headers=AUTH)
    assert response.status_code == 503
    assert "61 s old" in response.json()["detail"]


def test_staleness_check_can_be_disabled(runtime: DecisionsRuntime) -> None:
    runtime.t += 10_000
    assert make_client(runtime, stale_after_s=0).get("/v1/keda/llm/chat", headers=AUTH).status_code == 200


def test_before_the_first_tick_is_503(runtime: DecisionsRuntime) -> None:
    runtime.started = False
    assert make_client(runtime).get("/v1/keda/llm/chat", headers=AUTH).status_code == 503


def test_non_finite_forecast_values_are_left_out(runtime: DecisionsRuntime) -> None:
    forecast = {"arrival_rate": math.nan, "queue": math.inf, "horizon_s": 150.0}
    runtime.decisions["llm/chat"] = replace(decision("llm/chat"), forecast=forecast)
    body = make_client(runtime).get("/v1/keda/llm/chat", headers=AUTH).json()
    assert body["arrivalRate"] is None
    assert body["forecast"] == {"horizon_s": 150.0}


@settings(max_examples=80, deadline=None)
@given(namespace=st.text(min_size=1, max_size=70), name=st.text(min_size=1, max_size=70))
def test_fuzzed_paths_never_500(namespace: str, name: str) -> None:
    client = make_client(DecisionsRuntime({"llm/chat": decision("llm/chat")}))
    response = client.get(f"/v1/keda/{quote(namespace, safe='')}/{quote(name, safe='')}", headers=AUTH)
    assert response.status_code in {200, 404, 405, 422}
