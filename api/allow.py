"""A 405's ``Allow`` names every method the path answers, as RFC 9110 (15.5.6) asks.

FastAPI registers each method of a path as a route of its own, and Starlette answers a method no route takes with
the ``Allow`` of the first route whose path matched: ``PUT /v1/drains`` said ``Allow: GET`` although ``POST`` is
served too. This middleware puts the union of the matching routes' methods in
place of that header (HEAD with GET, as ``api.head`` answers it)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class AllowAllMethods:
    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                methods = self._methods(scope)
                if methods:
                    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                    headers.append((b"allow", ", ".join(methods).encode("latin-1")))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_allow)

    def _methods(self, scope: Scope) -> list[str]:
        """The methods some route takes at this path, asked of each route as the router asks it (``matches``, the
        routes' public test: FastAPI nests included routers in routes of their own)."""
        methods = {m for m in _METHODS if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in self.routes)}
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
