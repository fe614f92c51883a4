"""HEAD answered as GET without the body, as plain ASGI middleware.

RFC 9110 (9.3.2) has a server answer HEAD wherever it answers GET; FastAPI routes declare GET only, so `curl -I
/healthz` and uptime checks that send HEAD got 405. The route runs as for GET (the same auth, the same status and
headers, Content-Length included); the body is left out."""

from __future__ import annotations

from api.limits import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the rest of a streamed body: nothing of it is sent
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        # the server keeps its own scope (method HEAD), so it frames the answer as one to HEAD
        await self.app({**scope, "method": "GET"}, receive, without_body)
