"""Scaling decisions with their reasons, newest first, paged by cursor: the list only grows (every deployment at
least once a minute, kept for the retention), so a page never counts or skips the rows before it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import convert, schemas
from api.deps import Reader, SessionsDep
from api.handoff import in_thread
from api.paging import KeysetPosition, of_keyset
from store import repo
from store.db import transaction

router = APIRouter(prefix="/v1/decisions", tags=["decisions"])


@router.get("", response_model=schemas.CursorPage[schemas.DecisionOut])
@in_thread
def list_decisions(
    _: Reader,
    sessions: SessionsDep,
    after: KeysetPosition,
    deployment: Annotated[str | None, Query(max_length=253, description="'namespace/name'")] = None,
    reason: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11, description="epoch seconds")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Items per page.")] = 100,
) -> schemas.CursorPage[object]:
    with transaction(sessions, reads_only=True) as s:
        found = repo.list_decisions(
            session=s, deployment=deployment, reason=reason, since=since, limit=limit, after=after
        )
    return of_keyset(found, convert.decision)
