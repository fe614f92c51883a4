"""A deadline for every API request that may touch the store, as plain ASGI middleware.

A database that stops answering (a stopped server answers nothing, not even an error) would hold a request, and
the worker thread serving it, for as long as it stays away. After ``timeout_s`` the client gets a 503 at once;
the handler's thread finishes whenever the store answers, and a transaction that reaches its COMMIT after the
deadline rolls back (``store.db.request_deadline``), so a change the client saw fail is not applied later. The
one window left, a COMMIT already sent when the server stopped, is covered by every mutating route being
idempotent (drain requests per node, target adds per URL) or compare-and-set (approve, cancel): a retry is safe.

A client still sending its body at the deadline (a slow or stalled client) gets a 408 instead: the request never
reached its handler, so nothing in it is applied, and the connection is closed.

Liveness, readiness and ``/metrics`` never touch the store and are left alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from store.db import request_deadline

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})


class RequestDeadline:
    def __init__(self, app: ASGIApp, *, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in EXEMPT:
            await self.app(scope, receive, send)
            return
        started = False
        abandoned = False
        awaiting_client = False  # inside receive(): the request's body has not all arrived

        async def watched_receive() -> Message:
            nonlocal awaiting_client
            awaiting_client = True
            try:
                return await receive()
            finally:
                awaiting_client = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if abandoned:
                return  # the client already has its 503
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        token = request_deadline.set(time.monotonic() + self.timeout_s)
        try:
            task = asyncio.ensure_future(self.app(scope, watched_receive, guarded_send))
        finally:
            request_deadline.reset(token)
        done, _ = await asyncio.wait({task}, timeout=self.timeout_s)
        if done:
            task.result()
            return
        if started:  # a response under way (a slow stream): let it finish
            await task
            return
        abandoned = True
        if awaiting_client:
            # Still waiting for the client's body (a slow or stalled client): its fault, and nothing was applied;
            # the handler never ran, so cancelling it frees no thread but ends the wait.
            task.cancel()
            detail = f"the request body did not arrive within {self.timeout_s:g} s; nothing in this request is applied"
            await _answer(send, 408, detail, [(b"connection", b"close")])
            return
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved, never "never retrieved"
        detail = f"the store did not answer within {self.timeout_s:g} s; a change in this request is not applied"
        await _answer(send, 503, detail, [(b"retry-after", b"5")])


async def _answer(send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
