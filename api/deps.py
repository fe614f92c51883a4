"""Dependencies shared by the routers, as ``Annotated`` aliases: the runtime, the store, auth and paging.

Each is ``async def`` although none awaits anything: FastAPI runs a plain ``def`` dependency in its thread pool, a
hand-off to a worker thread and back per dependency per request. During a tick each hand-off waits for the GIL and
for a CPU (the tick's stages run in threads too); these do microseconds of work, so they run on the event loop.
A handler's store read is what belongs in a thread (``api.handoff``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal, TokenAuth
from api.runtime import Runtime

# auto_error=False: TokenAuth gives the 401/403 bodies; this only documents the scheme in OpenAPI.
_bearer = HTTPBearer(auto_error=False, description="A read or admin token (KVPILOT_READ_TOKENS / _ADMIN_TOKENS).")


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_runtime(request: Request) -> Runtime:
    return _runtime(request)


async def get_sessions(request: Request) -> sessionmaker[Session]:
    return _runtime(request).sessions


def _auth(request: Request) -> TokenAuth:
    auth: TokenAuth = request.app.state.auth
    return auth


def _header(request: Request) -> list[str]:
    return request.headers.getlist("authorization")  # every one: more than one is refused (TokenAuth.authenticate)


async def require_read(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    return _auth(request).authenticate(_header(request), need_admin=False)


async def require_admin(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    return _auth(request).authenticate(_header(request), need_admin=True)


async def holders_store(request: Request, _: Annotated[Principal, Depends(require_read)]) -> None:
    """Refuse (503, after authentication) what only the Lease holder's store holds, on a replica whose store is its
    own SQLite: its findings and drains would read as none, and a drain approved here would never reach the holder.
    A retry through the Service may reach the holder; the fix is one PostgreSQL for all replicas, or one replica."""
    why = _runtime(request).health().store_not_holders
    if why is not None:
        raise HTTPException(503, why, headers={"Retry-After": "1"})


@dataclass(frozen=True, slots=True)
class PageParams:
    limit: int
    offset: int


async def page_params(
    limit: Annotated[int, Query(ge=1, le=1000, description="Items per page.")] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000, description="Items to skip.")] = 0,
) -> PageParams:
    return PageParams(limit, offset)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
Reader = Annotated[Principal, Depends(require_read)]
Admin = Annotated[Principal, Depends(require_admin)]
Paging = Annotated[PageParams, Depends(page_params)]
