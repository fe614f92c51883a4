"""What a Prometheus (or whatever stands at its URL) writes reaches kvpilot's errors and log clipped and escaped
(helper H, session 18): a 3 MB ``error`` was a 3,000,034-character PromQLError, logged every tick, and terminal
control sequences, line breaks and bidi overrides in it passed through raw. A failing answer's body is read no
further than it is quoted."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource
from collector.promql import decode
from collector.promql.decode import SERVER_TEXT_CHARS, server_text
from tests.helpers.poll import until
from tests.helpers.promql_loop import collection_failures
from tests.helpers.raw_servers import Listener, read_head
from tests.unit.collector.test_promql_garbage import Garbage

NOW = 1_700_000_600.0
HOSTILE = "\x1b[2J\x1b]0;owned\x07\r\nlevel=error fake line\u202egnp.exe\u2028\x00"  # clear screen, title, CRLF, RLO


def test_server_text_is_clipped_saying_how_much_and_escaped() -> None:
    assert server_text("bad_data: 1:5: parse error") == "bad_data: 1:5: parse error"  # the usual error untouched
    text = server_text(HOSTILE + "x" * 3_000_000)
    assert text.isprintable()
    assert text.startswith(r"\x1b[2J\x1b]0;owned\x07\r\nlevel=error fake line\u202egnp.exe\u2028\x00xxx")
    assert text.endswith(f"... ({len(HOSTILE) + 3_000_000 - SERVER_TEXT_CHARS} more characters cut)")
    assert len(text) < SERVER_TEXT_CHARS + 200  # escapes widen at most the clipped part
    assert server_text("é ☃ 指标") == "é ☃ 指标"  # printable non-ASCII kept as written
    assert server_text("x" * 10, 4, whole=False) == "xxxx... (6 or more characters cut)"
    assert server_text("xx", 4, whole=False) == "xx... (0 or more characters cut)"
    assert server_text(None) == "None"


@pytest.mark.parametrize(
    ("answer", "starts"),
    [
        # Prometheus' error, 3 MB, control characters at its start (helper H's case)
        ({"status": "error", "errorType": "bad_data", "error": HOSTILE + "e" * 3_000_000}, "http://prom: bad_data: "),
        # the same in errorType
        ({"status": "error", "errorType": HOSTILE + "t" * 3_000_000, "error": "x"}, "http://prom: "),
        # a JSON string where an object belongs (was quoted raw)
        (HOSTILE + "s" * 3_000_000, "http://prom: not a Prometheus API answer: "),
    ],
)
def test_an_error_answer_is_one_bounded_printable_line(answer: Any, starts: str) -> None:
    with pytest.raises(PromQLError) as caught:
        decode.answer(json.dumps(answer).encode(), "http://prom")
    message = str(caught.value)
    assert message.startswith(starts)
    assert message.isprintable()
    assert r"\x1b[2J" in message
    assert "more characters cut)" in message
    assert len(message) < 2 * SERVER_TEXT_CHARS + 400


@pytest.mark.parametrize(
    "data",
    [HOSTILE + "d" * 100_000, {"resultType": "vector", "result": HOSTILE + "r" * 100_000}],
)
def test_a_vector_answer_laid_out_otherwise_is_quoted_escaped(data: Any) -> None:
    with pytest.raises(PromQLError) as caught:
        decode.vector(data, "http://prom")
    message = str(caught.value)
    assert message.isprintable()
    assert len(message) < 400


class Failing(Listener):
    """Answers every request ``500`` with ``body`` (Content-Length framed); records whether all of it was sent."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sent_whole: list[bool] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        with conn:
            if read_head(conn) is None:
                return
            head = f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(self.body)}\r\n\r\n".encode()
            try:
                conn.sendall(head + self.body)
            except OSError:
                self.sent_whole.append(False)
            else:
                self.sent_whole.append(True)


@pytest.fixture
def failing() -> Iterator[Failing]:
    server = Failing((HOSTILE + "b" * 30_000_000).encode())
    yield server
    server.close()


@pytest.mark.parametrize("through", ["plain", "httpx"])
async def test_a_failing_answer_is_quoted_bounded_and_read_no_further(failing: Failing, through: str) -> None:
    client = httpx.AsyncClient(timeout=10) if through == "httpx" else None
    source = PromQLSource(failing.url, reader="thread", clock=VirtualClock(NOW), client=client)
    try:
        with pytest.raises(PromQLError) as caught:
            await source.query_vector("up", NOW)
    finally:
        await source.aclose()
        if client is not None:
            await client.aclose()
    message = str(caught.value)
    assert message.startswith(f"{failing.url}/api/v1/query: HTTP 500: \\x1b[2J\\x1b]0;owned\\x07\\r\\nlevel=error")
    assert message.endswith("or more characters cut)")
    assert message.isprintable()
    assert len(message) < 1000
    # 30 MB offered; the client stopped reading at ERROR_BODY_BYTES and closed (httpx read it all: was True)
    await until(lambda: bool(failing.sent_whole), what="the server's send to end", timeout_s=20)
    assert failing.sent_whole == [False]


async def test_the_loop_logs_a_hostile_error_as_one_short_printable_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Answers /api/v1/metadata and every query with a 3 MB hostile `status: error`, 200.
    error = {"status": "error", "errorType": "bad_data", "error": HOSTILE + "e" * 3_000_000}
    server = Garbage(error, metadata=error)
    try:
        records = await collection_failures(server.url, tmp_path, caplog, interval_s=2, timeout_s=1.5, wait_s=30)
    finally:
        server.close()
    failed = [r.getMessage() for r in records]
    assert failed
    for line in failed:
        assert line.isprintable()
        assert len(line) < 2 * SERVER_TEXT_CHARS + 400  # was 3,000,034 characters and more
        assert ": bad_data: \\x1b[2J" in line
        assert line.endswith(f"... ({len(HOSTILE) + 3_000_000 - SERVER_TEXT_CHARS} more characters cut)")
