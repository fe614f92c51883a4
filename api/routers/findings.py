"""Findings from the store (open, acknowledged and closed episodes), filterable; admins acknowledge them."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query

from api import convert, schemas
from api.deps import Admin, Paging, Reader, RuntimeDep, SessionsDep, holders_store
from api.handoff import in_thread, writes_in_thread
from api.json_body import JSONBodyRoute
from api.paging import of_store
from store import repo
from store.db import transaction

log = logging.getLogger(__name__)
# Only the Lease holder writes findings: a replica with its own SQLite answers 503 (api.deps.holders_store).
router = APIRouter(
    prefix="/v1/findings", tags=["findings"], route_class=JSONBodyRoute, dependencies=[Depends(holders_store)]
)

FindingId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="Finding.id: 16 hex digits")]
Filter = Annotated[str | None, Query(max_length=253)]


@router.get("", response_model=schemas.Page[schemas.FindingOut])
@in_thread
def list_findings(
    _: Reader,
    sessions: SessionsDep,
    page: Paging,
    state: Literal["open", "acknowledged", "closed"] | None = None,
    kind: Filter = None,
    severity: Literal["info", "warning", "critical"] | None = None,
    deployment: Filter = None,
    node: Filter = None,
) -> schemas.Page[object]:
    with transaction(sessions, reads_only=True) as s:
        found = repo.list_findings(
            session=s,
            state=state,
            kind=kind,
            severity=severity,
            deployment=deployment,
            node=node,
            limit=page.limit,
            offset=page.offset,
        )
        return of_store(found, convert.finding)


@router.get("/{finding_id}", response_model=schemas.FindingOut, responses={404: {"model": schemas.Error}})
@in_thread
def get_finding(finding_id: FindingId, _: Reader, sessions: SessionsDep) -> schemas.FindingOut:
    with transaction(sessions, reads_only=True) as s:
        return convert.finding(repo.get_finding(session=s, finding_id=finding_id))


@router.post(
    "/{finding_id}/acknowledge",
    response_model=schemas.FindingOut,
    responses={404: {"model": schemas.Error}, 409: {"model": schemas.Error}},
)
@writes_in_thread
def acknowledge(
    finding_id: FindingId, body: schemas.AcknowledgeIn, who: Admin, runtime: RuntimeDep, sessions: SessionsDep
) -> schemas.FindingOut:
    with transaction(sessions) as s:
        row = repo.acknowledge_finding(session=s, finding_id=finding_id, by=who.name, note=body.note, now=runtime.now())
        out = convert.finding(row)
    log.info("audit: %s acknowledged finding %s (%s)", who.name, finding_id, out.kind)
    return out
