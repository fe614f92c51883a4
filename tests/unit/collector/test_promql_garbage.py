"""A Prometheus (or what stands at its URL) answering garbage: JSON laid out otherwise than the Prometheus API's is a
PromQLError naming the URL (it was a TypeError or AttributeError deep in the reading, every tick, naming nothing), and
`kvpilot run`'s loop says so in one line a tick (it logged some 30 lines of traceback a tick)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource
from tests.helpers.json_server import JsonServer
from tests.helpers.promql_loop import collection_failures

NOW = 1_700_000_600.0
METADATA = {"status": "success", "data": {"vllm:num_requests_running": [{"type": "gauge", "help": "", "unit": ""}]}}


def _vector(*series: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(series)}}


GOOD = {"metric": {"__name__": "vllm:num_requests_running", "namespace": "ns", "pod": "p0"}, "value": [NOW, "1"]}


class Garbage(JsonServer):
    """Answers /api/v1/metadata with ``metadata`` and every query with ``query`` (JSON-encoded, 200)."""

    def __init__(self, query: Any, metadata: Any = METADATA) -> None:
        answers = {"/api/v1/metadata": json.dumps(metadata).encode(), "": json.dumps(query).encode()}
        super().__init__(lambda path, _body, _head: (200, answers.get(path.partition("?")[0], answers[""])))


@pytest.fixture
def garbage(request: pytest.FixtureRequest) -> Iterator[Garbage]:
    server = Garbage(*request.param)
    yield server
    server.close()


@pytest.mark.parametrize(
    ("garbage", "reader", "error"),
    [
        # metadata that is a vector (AttributeError: 'str' object has no attribute 'items' ... a TypeError)
        ((_vector(GOOD), _vector(GOOD)), "thread", r"/api/v1/metadata: not laid out as the Prometheus API's"),
        # a series with null labels and no value, read by the replicas' reader (TypeError: argument of type 'NoneType'
        # is not iterable), in the reader process as kvpilot run reads it and in a thread
        ((_vector(GOOD, {"metric": None, "value": [NOW, None]}),), "process", r"query answers: not laid out as the"),
        ((_vector(GOOD, {"metric": None, "value": [NOW, None]}),), "thread", r"query answers: not laid out as the"),
        ((_vector({"metric": {"pod": "p1"}, "value": "oops"}),), "thread", r"query answers: not laid out as the"),
        # not an object at all (was "None: [1, 2, 3]")
        (([1, 2, 3],), "thread", r"query .*: not a Prometheus API answer: \[1, 2, 3\]$"),
    ],
    indirect=["garbage"],
)
async def test_answers_laid_out_otherwise_are_a_promql_error_naming_the_url(
    garbage: Garbage, reader: Any, error: str
) -> None:
    source = PromQLSource(garbage.url, reader=reader, clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match=error):
            await source.collect_once()
    finally:
        await source.aclose()


@pytest.mark.parametrize("mode", ["replicas", "aggregates"])
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        # a success without data: the aggregates' reader let a KeyError out (a traceback every tick), the replicas'
        # said "not laid out"
        ({"status": "success"}, r"(query |/api/v1/query).*: a success without data: \{'status': 'success'\}$"),
        # an error without errorType or error (a proxy's; or "status" given twice, the last kept): was "None: None"
        (
            {"status": "error"},
            r"(query |/api/v1/query).*: an answer of status error without errorType or error: \{'status': 'error'\}$",
        ),
    ],
)
async def test_an_answer_without_its_parts_is_said_for_what_it_is(mode: Any, answer: Any, error: str) -> None:
    server = Garbage(answer)
    source = PromQLSource(server.url, mode=mode, reader="thread", clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match=error):
            await source.collect_once()
    finally:
        await source.aclose()
        server.close()


@pytest.mark.parametrize(
    "series",
    [
        {"metric": None, "value": [NOW, "1"]},
        {"metric": {"namespace": 5}, "value": [NOW, "1"]},
        {"metric": {}, "value": [NOW]},
        {"metric": {}, "value": [NOW, None]},
        "a string",
    ],
)
async def test_a_vector_with_a_series_laid_out_otherwise_is_refused_naming_it(series: Any) -> None:
    server = Garbage(_vector(GOOD, series))
    source = PromQLSource(server.url, reader="thread", clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match=r"query 'up': a series not laid out as"):
            await source.query_vector("up", NOW)  # the kube-state-metrics reader's and the aggregates' way in
    finally:
        await source.aclose()
        server.close()


async def test_the_loop_says_a_failing_prometheus_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = Garbage("<html>Sign in</html>")
    try:
        failed = await collection_failures(server.url, tmp_path, caplog, interval_s=0.5, timeout_s=0.4, wait_s=20)
    finally:
        server.close()
    assert failed
    assert all(r.exc_info is None for r in failed)  # no traceback
    assert failed[0].getMessage().endswith(": not a Prometheus API answer: <html>Sign in</html>")
