"""One KEDA reader (scaler/keda/reader.py): gRPC and the metrics-api route give the same answer, and the same
refusal, for the same board, with the staleness limit from settings."""

from __future__ import annotations

import grpc
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import errors
from api.auth import TokenAuth
from api.routers.metrics_api import router
from collector.clock import VirtualClock
from kvpilot.settings import load_settings
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda.reader import DecisionReader, NoDecision, StaleDecision
from scaler.publish import DecisionBoard
from tests.unit.scaler.keda.harness import NOW, decision, keda_poll, ref, running_scaler

TOKEN = "r" * 24
STALE_S = 60.0


def _http(reader: DecisionReader) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.include_router(router)
    app.state.auth = TokenAuth((TOKEN,), (), anonymous_read=False)
    app.state.keda_reader = reader
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


async def _grpc_error(stub, so: pb.ScaledObjectRef) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so))
    return raised.value


async def test_grpc_and_metrics_api_agree_on_answer_absence_and_staleness() -> None:
    async with running_scaler(stale_after_s=STALE_S) as scaler:
        http = _http(scaler.reader)  # the object gRPC answers through, as `kvpilot run` hands it to both
        scaler.board.publish(decision("llm/chat", desired=5, warm=2))
        scaler.clock.advance(STALE_S)  # at the limit: still served by both
        replicas, active, *_ = await keda_poll(scaler.stub, ref())
        body = http.get("/v1/keda/llm/chat").json()
        assert (replicas, active) == (body["replicas"], True) == (7, True)
        assert body["ageSeconds"] == STALE_S

        # no decision: NOT_FOUND and 404 with the same words
        missing = await _grpc_error(scaler.stub, ref("code"))
        answer = http.get("/v1/keda/llm/code")
        assert (missing.code(), answer.status_code) == (grpc.StatusCode.NOT_FOUND, 404)
        assert answer.json()["detail"] in (missing.details() or "")
        assert "deployments with decisions: llm/chat" in answer.json()["detail"]

        # one second past the limit: UNAVAILABLE and 503, the same message
        scaler.clock.advance(1)
        stale = await _grpc_error(scaler.stub, ref())
        answer = http.get("/v1/keda/llm/chat")
        assert (stale.code(), answer.status_code) == (grpc.StatusCode.UNAVAILABLE, 503)
        assert answer.json()["detail"] == stale.details()
        assert "61 s old (limit 60 s)" in answer.json()["detail"]


def test_reader_refusals_and_a_disabled_limit() -> None:
    board, clock = DecisionBoard(), VirtualClock(NOW)
    reader = DecisionReader(board, clock, 30)
    with pytest.raises(NoDecision, match="none yet"):
        reader.read("llm/chat")
    board.publish(decision("llm/chat", desired=3))
    clock.advance(30)
    published, age = reader.read("llm/chat")
    assert (published.decision.desired_replicas, age) == (3, 30)
    clock.advance(0.5)
    with pytest.raises(StaleDecision, match="30 s old"):  # 30.5 s, rounded in the text
        reader.read("llm/chat")
    assert DecisionReader(board, clock, 0).read("llm/chat")[1] == 30.5  # 0 disables the check
    with pytest.raises(ValueError, match="stale_after_s"):
        DecisionReader(board, clock, -1)


@pytest.mark.parametrize("interval_s", [1.0, 5.0, 60.0, 3600.0])
def test_the_staleness_limit_always_spans_several_loop_intervals(interval_s: float) -> None:
    # The limit is counted in loop intervals (keda.stale_after_ticks >= 2), so however long the interval, a loop
    # that keeps its pace never has its answers refused as stale; a limit under two intervals is refused.
    # (A replica's own readiness limit must outlast the tick too: collector.stale_after_s, one interval here.)
    collector = {"interval_s": interval_s, "timeout_s": min(interval_s / 2, 60), "stale_after_s": interval_s}
    s = load_settings(collector=collector)
    assert s.decision_stale_after_s >= 2 * s.collector.interval_s
    with pytest.raises(ValueError, match="stale_after_ticks"):
        load_settings(collector=collector, keda={"stale_after_ticks": 1.5})


class SteppedClock(VirtualClock):
    """A wall clock that NTP may step backwards."""

    def step_back(self, seconds: float) -> None:
        self._now -= seconds


async def test_a_decision_made_before_the_clock_stepped_back_is_stale_until_the_next() -> None:
    # before: its age was -3600 s, so it was served as fresh for the hour, a loop that stopped deciding meanwhile
    # included (the liveness the limit is for); a step within CLOCK_STEP_S is no step
    board, clock = DecisionBoard(), SteppedClock(NOW)
    reader = DecisionReader(board, clock, 30)
    board.publish(decision("llm/chat", desired=3))
    clock.advance(10)
    clock.step_back(10.5)
    assert reader.read("llm/chat")[1] == -0.5
    clock.step_back(3600)
    with pytest.raises(StaleDecision, match="stamped 3600 s in the future: the clock stepped back since"):
        reader.read("llm/chat")
    assert DecisionReader(board, clock, 0).read("llm/chat")[1] == -3600.5  # 0 disables the check
    board.publish(decision("llm/chat", desired=4, timestamp=clock.now()))  # the loop's next tick
    assert reader.read("llm/chat")[0].decision.desired_replicas == 4
