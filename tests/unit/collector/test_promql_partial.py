"""A Prometheus-compatible database that says it answers in part: the answer is refused, not read as the fleet.

VictoriaMetrics cluster with storage nodes down (more than its replication covers) answers `success` with the series
of the nodes that answered and `"isPartial": true`. kvpilot read it as the fleet: the replicas the missing part holds
vanished from the tick and their load with them (a scale-down planned on a part of the fleet). Now an `isPartial`
answer is a PromQLError, so the tick's collection fails in one line and the last samples stand, as when Prometheus
is away. An answer without a status was said as "None: None"."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from email.message import Message
from typing import Any
from urllib.parse import parse_qs

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource
from tests.helpers.json_server import JsonServer

NOW = 1_700_000_600.0
STORE_DOWN = "receive series from Addr: 10.0.3.7:10901: rpc error: code = Unavailable\x1b[2J"
METADATA = {"status": "success", "data": {"vllm:num_requests_running": [{"type": "gauge", "help": "", "unit": ""}]}}


def _series(pod: str) -> dict[str, Any]:
    labels = {"__name__": "vllm:num_requests_running", "namespace": "ns", "pod": pod, "job": "j", "instance": pod}
    return {"metric": labels, "value": [NOW, "3"]}


class _Partial(JsonServer):
    """Answers every query with the series of pod p0 only (p1's storage node is down): ``victoriametrics``, success
    and isPartial, as vmselect answers; ``thanos``, success and a warning, as a Thanos Querier answers with a store
    down (its default, --query.partial-response); ``no-status``, the same without its status."""

    def __init__(self, kind: str) -> None:
        self.forms: list[dict[str, list[str]]] = []
        forms = self.forms

        def answer(path: str, form: bytes, _head: Message) -> tuple[int, bytes]:
            if path.startswith("/api/v1/metadata"):
                return 200, json.dumps(METADATA).encode()
            forms.append(parse_qs(form.decode()))
            body: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": [_series("p0")]}}
            if kind == "victoriametrics":
                body["isPartial"] = True
            elif kind == "thanos":
                body["warnings"] = [STORE_DOWN]
            else:
                del body["status"]
            return 200, json.dumps(body).encode()

        super().__init__(answer)


@pytest.fixture
def partial(request: pytest.FixtureRequest) -> Iterator[_Partial]:
    server = _Partial(request.param)
    yield server
    server.close()


@pytest.mark.parametrize(
    ("partial", "reader", "error"),
    [
        ("victoriametrics", "thread", r"a partial answer \(isPartial: some of the database's storage nodes did not"),
        ("victoriametrics", "process", r"a partial answer \(isPartial"),
        ("no-status", "thread", r"not a Prometheus API answer \(no status\): \{'data'"),
    ],
    indirect=["partial"],
)
async def test_a_partial_answer_is_refused_not_read_as_the_fleet(partial: _Partial, reader: Any, error: str) -> None:
    # before: one replica read (p0), the other gone from the tick without a word; no status: "None: None"
    source = PromQLSource(partial.url, reader=reader, clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match=error):
            await source.collect_once()
    finally:
        await source.aclose()
    assert partial.forms


async def test_a_single_query_refuses_a_partial_answer_too() -> None:
    server = _Partial("victoriametrics")
    source = PromQLSource(server.url, reader="thread", clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match="isPartial"):
            await source.query_vector("up", NOW)  # the kube-state-metrics reader's and the aggregates' way in
    finally:
        await source.aclose()
        server.close()


async def test_a_warning_an_answer_carries_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    # A Thanos Querier's partial answer is still read (an HA pair's other copy may be whole: kvpilot cannot tell), but
    # its warning is said, once, escaped. Before: read without a word.
    caplog.set_level(logging.WARNING, logger="collector.discovery.promql")
    server = _Partial("thanos")
    source = PromQLSource(server.url, reader="thread", clock=VirtualClock(NOW))
    try:
        for _ in range(2):
            result = await source.collect_once()
            assert [r.replica for r in result.replicas] == ["p0"]
    finally:
        await source.aclose()
        server.close()
    said = [r.getMessage() for r in caplog.records if "carries a warning" in r.getMessage()]
    assert len(said) == 1
    assert said[0].endswith("(a store behind a query layer that did not answer): receive series from Addr: "
                            "10.0.3.7:10901: rpc error: code = Unavailable\\x1b[2J")  # fmt: skip
