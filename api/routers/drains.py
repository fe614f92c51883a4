"""Drain actions: request (``POST {"node": NAME}``), approve, cancel; each step audited with who and when.

The API only moves the state machine; the service's drain worker (the Lease holder) executes approved drains
behind the safety rails (dry run, at most K at once, circuit breaker)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, status

from api import convert, schemas
from api.deps import Admin, Paging, Reader, RuntimeDep, SessionsDep, holders_store
from api.handoff import in_thread, writes_in_thread
from api.json_body import JSONBodyRoute
from api.paging import of_store
from store import repo
from store.db import transaction
from store.drain_states import DrainState

log = logging.getLogger(__name__)
# Only the Lease holder proposes drains: a replica with its own SQLite answers 503 (api.deps.holders_store).
router = APIRouter(
    prefix="/v1/drains", tags=["drains"], route_class=JSONBodyRoute, dependencies=[Depends(holders_store)]
)

ActionId = Annotated[int, Path(ge=1, le=2**31 - 1)]
_ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": schemas.Error}, 409: {"model": schemas.Error}}


@router.get("", response_model=schemas.Page[schemas.DrainOut])
@in_thread
def list_drains(
    _: Reader,
    sessions: SessionsDep,
    page: Paging,
    state: DrainState | None = None,
    node: Annotated[str | None, Query(max_length=253)] = None,
) -> schemas.Page[object]:
    with transaction(sessions, reads_only=True) as s:
        found = repo.list_drains(
            session=s, state=state.value if state else None, node=node, limit=page.limit, offset=page.offset
        )
        return of_store(found, convert.drain)


@router.post("", response_model=schemas.DrainOut, status_code=status.HTTP_201_CREATED, responses=_ERRORS)
@writes_in_thread
def request_drain(body: schemas.DrainIn, who: Admin, runtime: RuntimeDep, sessions: SessionsDep) -> schemas.DrainOut:
    with transaction(sessions) as s:
        row = repo.request_drain(
            session=s,
            node=body.node,
            requested_by=who.name,
            now=runtime.now(),
            dry_run=runtime.drain_dry_run,
            reason=body.reason or "requested through the API",
        )
        out = convert.drain(row, repo.list_drain_events(session=s, action_id=row.id))
    log.info("audit: %s requested a drain of %s (action %d)", who.name, body.node, out.id)
    return out


@router.get("/{action_id}", response_model=schemas.DrainOut, responses=_ERRORS)
@in_thread
def get_drain(action_id: ActionId, _: Reader, sessions: SessionsDep) -> schemas.DrainOut:
    with transaction(sessions, reads_only=True) as s:
        row = repo.get_drain(session=s, action_id=action_id)
        return convert.drain(row, repo.list_drain_events(session=s, action_id=action_id))


@router.post("/{action_id}/approve", response_model=schemas.DrainOut, responses=_ERRORS)
@writes_in_thread
def approve(
    action_id: ActionId, body: schemas.DrainApproveIn, who: Admin, runtime: RuntimeDep, sessions: SessionsDep
) -> schemas.DrainOut:
    with transaction(sessions) as s:
        row = repo.approve_drain(
            session=s,
            action_id=action_id,
            actor=who.name,
            now=runtime.now(),
            max_concurrent=runtime.drain_max_concurrent,
            message=body.message,
            budget=runtime.drain_budget,
            budget_window_s=runtime.drain_budget_window_s,
            over_budget=body.over_budget,
        )
        out = convert.drain(row, repo.list_drain_events(session=s, action_id=action_id))
    over = out.events[-1].message.startswith("approved over drains.budget") if out.events else False
    log.info(
        "audit: %s approved drain %d of %s%s", who.name, action_id, row.node, " over drains.budget" if over else ""
    )
    return out


@router.post("/{action_id}/cancel", response_model=schemas.DrainOut, responses=_ERRORS)
@writes_in_thread
def cancel(
    action_id: ActionId, body: schemas.DrainTransitionIn, who: Admin, runtime: RuntimeDep, sessions: SessionsDep
) -> schemas.DrainOut:
    with transaction(sessions) as s:
        row = repo.transition_drain(
            session=s,
            action_id=action_id,
            to=DrainState.CANCELLED,
            actor=who.name,
            now=runtime.now(),
            message=body.message,
        )
        out = convert.drain(row, repo.list_drain_events(session=s, action_id=action_id))
    log.info("audit: %s cancelled drain %d of %s", who.name, action_id, row.node)
    return out
