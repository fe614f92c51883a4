"""Errors raised below the edge, turned into HTTP answers with bodies that say what went wrong."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DataError, SQLAlchemyError
from starlette.requests import ClientDisconnect

from api.auth import AuthError
from store.errors import BudgetSpent, DeadlinePassed, InvalidTransition, NotFound, RailFull, WritersQueued

log = logging.getLogger(__name__)


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: a 422 echoes the offending input, and a lone surrogate in it
    cannot be encoded as UTF-8 (the default response would fail with a 500 while reporting a 422)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity written as the text JSON lacks a number for: a body such as
    ``{"node": NaN}`` (Python's JSON reader accepts it) is refused with the value echoed, as "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_BODY_HINT = "; send a JSON object with Content-Type: application/json (`{}` where every field is optional)"


def _with_hint(error: Any) -> Any:
    """A body missing, or not read as JSON (curl's -d without the header sends a form), is refused as a whole
    (`loc` ["body"]): say what to send, where pydantic's own words ("Field required") name no fix."""
    if isinstance(error, dict) and tuple(error.get("loc", ())) == ("body",) and error.get("type") != "json_invalid":
        return {**error, "msg": f"{error.get('msg', '')}{_BODY_HINT}"}
    return error


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = [_with_hint(error) for error in e.errors()]
        return AsciiJSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    @app.exception_handler(UnicodeError)
    async def _unencodable(_: Request, e: UnicodeError) -> JSONResponse:
        return JSONResponse({"detail": "the request holds text that is not valid Unicode"}, status_code=422)

    @app.exception_handler(DataError)
    async def _unstorable(_: Request, e: DataError) -> JSONResponse:
        # The store refused a value (PostgreSQL: a NUL in a query parameter): the request's fault, not the store's.
        log.warning("store refused a value from a request: %s", str(e.orig).splitlines()[0] if e.orig else "")
        return JSONResponse({"detail": "a value in the request cannot be stored or searched for"}, status_code=422)

    @app.exception_handler(AuthError)
    async def _auth(request: Request, e: AuthError) -> JSONResponse:
        # Who tried what, never the token: failed logins are what an operator looks for after an incident.
        client = request.client.host if request.client else "unknown"
        auth = getattr(request.app.state, "auth", None)
        if auth is not None:
            auth.count_refusal(e.status)
        log.warning("audit: refused %s %s from %s: %d %s", request.method, request.url.path, client, e.status, e.detail)
        headers = {"WWW-Authenticate": 'Bearer realm="kvpilot"'} if e.status == 401 else None
        return JSONResponse({"detail": e.detail}, status_code=e.status, headers=headers)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _: ClientDisconnect) -> Response:
        # The client closed its connection before its body was all in: nothing was applied, and no one is left to
        # answer (the answer goes nowhere). Before, uvicorn logged "Exception in ASGI application" and a traceback
        # each time, so any client that hung up mid-body filled the log with what read as kvpilot's own faults.
        log.debug(
            "%s %s: the client closed its connection before its body was all in", request.method, request.url.path
        )
        return Response(status_code=400)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, e: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(RailFull)
    async def _rail(_: Request, e: RailFull) -> JSONResponse:
        rail = (
            'drains.budget; an admin may approve past it with {"over_budget": true}, audited'
            if isinstance(e, BudgetSpent)
            else "drains.max_concurrent"
        )
        return JSONResponse({"detail": f"{e} ({rail})"}, status_code=409)

    @app.exception_handler(InvalidTransition)
    async def _conflict(_: Request, e: InvalidTransition) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    @app.exception_handler(WritersQueued)
    async def _queued(_: Request, e: WritersQueued) -> JSONResponse:
        # SQLite's writers queued as deep as they may (store.writers): refused at once, not after the busy timeout
        return JSONResponse({"detail": str(e)}, status_code=503, headers={"Retry-After": str(e.retry_after_s)})

    @app.exception_handler(DeadlinePassed)
    async def _too_late(_: Request, e: DeadlinePassed) -> JSONResponse:
        # the request's deadline came while its change waited for the store (its turn, its COMMIT): usually the
        # deadline's own 503 is out first (api.deadline) and this answer goes nowhere; when the handler is a moment
        # ahead of it, this is that 503 (it was a 500, "Exception in ASGI application")
        return JSONResponse({"detail": str(e)}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(SQLAlchemyError)
    async def _store(_: Request, e: SQLAlchemyError) -> JSONResponse:
        log.error("store error while serving a request: %s", type(e).__name__)
        return JSONResponse(
            {"detail": "the store is unavailable; live state is still served, history and changes are not"},
            status_code=503,
        )
