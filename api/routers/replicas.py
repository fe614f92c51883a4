"""Engine replicas as of the latest tick."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import convert, schemas
from api.deps import Paging, Reader, RuntimeDep
from api.paging import of_list

router = APIRouter(prefix="/v1/replicas", tags=["replicas"])


@router.get("", response_model=schemas.Page[schemas.ReplicaOut])
def list_replicas(
    _: Reader,
    runtime: RuntimeDep,
    page: Paging,
    deployment: Annotated[str | None, Query(max_length=253, description="'namespace/name'")] = None,
    node: Annotated[str | None, Query(max_length=253)] = None,
) -> schemas.Page[object]:
    snap = runtime.snapshot()
    replicas = list(snap.replicas) if snap else []
    if deployment is not None:
        replicas = [r for r in replicas if r.sample.deployment_key == deployment]
    if node is not None:
        replicas = [r for r in replicas if r.sample.node == node]
    return of_list(replicas, page, convert.replica)
