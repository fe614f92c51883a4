"""`kvpilot run` builds one KEDA reader and hands that very object to the gRPC servicer and to the metrics-api
route, so both answer from the same board and go stale at the same settings-derived limit. The reader ages the
decisions on a virtual clock: on the wall clock, a loaded host that took over 2 s between publishing a decision
2 s inside the limit and the HTTP call read it stale (KeyError 'replicas' in a session 28 run)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api import main
from collector.clock import Clock, VirtualClock
from kvpilot.runtime import runner
from kvpilot.settings import Settings, load_settings
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.reader import DecisionReader
from scaler.keda.server import Endpoint
from scaler.publish import DecisionBoard
from tests.unit.kvpilot.fleet_double import START
from tests.unit.scaler.keda.harness import decision, ref


class Built(Exception):
    """run() stops once the app is built: the endpoint and the app are all this test needs."""


async def test_grpc_and_the_metrics_api_answer_from_one_reader_with_the_settings_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints: list[Endpoint | None] = []
    apps: list[FastAPI] = []
    build_keda_endpoint = runner._keda_endpoint
    build_keda_reader = runner.keda_reader
    clock = VirtualClock(START)

    def keda_reader(board: DecisionBoard, settings: Settings, _: Clock) -> DecisionReader:
        return build_keda_reader(board, settings, clock)  # run's own reader, its ages read on a clock that waits

    def keda_endpoint(*args: object, **kwargs: object) -> Endpoint | None:
        endpoint = build_keda_endpoint(*args, **kwargs)  # type: ignore[arg-type]
        endpoints.append(endpoint)
        return endpoint

    def create_app(*args: object, **kwargs: object) -> FastAPI:
        apps.append(main.create_app(*args, **kwargs))  # type: ignore[arg-type]
        raise Built

    monkeypatch.setattr(runner, "keda_reader", keda_reader)
    monkeypatch.setattr(runner, "_keda_endpoint", keda_endpoint)
    monkeypatch.setattr(runner, "create_app", create_app)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = load_settings(
        api={"host": "127.0.0.1", "http_port": 0, "grpc_port": 0, "anonymous_read": True},
        collector={"interval_s": 2, "timeout_s": 1},
    )
    limit_s = settings.decision_stale_after_s
    assert limit_s == 12.0  # keda.stale_after_ticks (6) x collector.interval_s (2 s)
    with pytest.raises(Built):
        await runner.run(settings)
    (endpoint,), (app,) = endpoints, apps
    assert endpoint is not None
    reader = endpoint.servicer.reader
    assert app.state.keda_reader is reader  # the very same object, not an equal copy
    assert reader.clock is clock
    assert reader.stale_after_s == limit_s
    board = reader.source
    assert isinstance(board, DecisionBoard)

    http = TestClient(app)
    stop = asyncio.Event()
    serving = asyncio.create_task(endpoint.serve(stop, grace_s=1.0))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{endpoint.port}")
    stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    request = pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="replicas")
    try:
        # a decision two seconds inside the limit: both serve it
        board.publish(decision("llm/chat", desired=4, timestamp=reader.clock.now() - (limit_s - 2)))
        assert (await stub.IsActive(ref(), timeout=10)).result is True
        assert http.get("/v1/keda/llm/chat").json()["replicas"] == 4
        # two seconds past it: both refuse, with the same words
        board.publish(decision("llm/chat", desired=4, timestamp=reader.clock.now() - (limit_s + 2)))
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await stub.GetMetrics(request, timeout=10)
        answer = http.get("/v1/keda/llm/chat")
        assert (stale.value.code(), answer.status_code) == (grpc.StatusCode.UNAVAILABLE, 503)
        assert answer.json()["detail"] == stale.value.details()
        assert f"(limit {limit_s:g} s)" in answer.json()["detail"]
    finally:
        stop.set()
        await serving
        await channel.close()
