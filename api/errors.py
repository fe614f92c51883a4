"""Errors raised below the edge, turned into HTTP answers with bodies that say what went wrong."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from api.auth import AuthError
from store.errors import InvalidTransition, NotFound

log = logging.getLogger(__name__)


def install(app: FastAPI) -> None:
    @app.exception_handler(AuthError)
    async def _auth(_: Request, e: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="kvpilot"'} if e.status == 401 else None
        return JSONResponse({"detail": e.detail}, status_code=e.status, headers=headers)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, e: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=404)

    @app.exception_handler(InvalidTransition)
    async def _conflict(_: Request, e: InvalidTransition) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, status_code=409)

    @app.exception_handler(SQLAlchemyError)
    async def _store(_: Request, e: SQLAlchemyError) -> JSONResponse:
        log.error("store error while serving a request: %s", type(e).__name__)
        return JSONResponse(
            {"detail": "the store is unavailable; live state is still served, history and changes are not"},
            status_code=503,
        )
