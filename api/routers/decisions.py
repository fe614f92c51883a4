"""Scaling decisions with their reasons, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import convert, schemas
from api.deps import Paging, Reader, SessionsDep
from api.paging import of_store
from store import repo
from store.db import transaction

router = APIRouter(prefix="/v1/decisions", tags=["decisions"])


@router.get("", response_model=schemas.Page[schemas.DecisionOut])
def list_decisions(
    _: Reader,
    sessions: SessionsDep,
    page: Paging,
    deployment: Annotated[str | None, Query(max_length=253, description="'namespace/name'")] = None,
    reason: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11, description="epoch seconds")] = None,
) -> schemas.Page[object]:
    with transaction(sessions) as s:
        found = repo.list_decisions(
            session=s, deployment=deployment, reason=reason, since=since, limit=page.limit, offset=page.offset
        )
    return of_store(found, convert.decision)
