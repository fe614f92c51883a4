"""A client that closes its connection before its request's body is all in: the API ends the request quietly (a
debug line), not with an exception for the server to log as a traceback ("Exception in ASGI application")."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from api.auth import TokenAuth
from api.main import create_app
from tests.unit.api.conftest import ADMIN, READ, FakeRuntime


@pytest.mark.parametrize("path", ["/v1/targets", "/v1/drains", "/v1/drains/1/approve"])
async def test_a_client_gone_mid_body_ends_its_request_quietly(
    runtime: FakeRuntime, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(runtime, TokenAuth([READ], [ADMIN], anonymous_read=False))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [
            (b"host", b"kvpilot"), (b"content-type", b"application/json"), (b"content-length", b"100"),
            (b"authorization", f"Bearer {ADMIN}".encode()),
        ],
        "client": ("10.0.0.3", 40000), "server": ("kvpilot", 8080),
    }  # fmt: skip
    received = iter([{"type": "http.request", "body": b'{"url"', "more_body": True}, {"type": "http.disconnect"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(received)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    caplog.set_level(logging.DEBUG, logger="api.errors")
    await app(scope, receive, send)  # before: starlette's ClientDisconnect raised out of the app
    assert "closed its connection before its body was all in" in caplog.text
