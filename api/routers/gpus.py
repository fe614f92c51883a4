"""GPUs as of the latest tick, including ones that vanished from their exporter (``present: false``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import convert, schemas
from api.deps import Paging, Reader, RuntimeDep
from api.paging import of_list

router = APIRouter(prefix="/v1/gpus", tags=["gpus"])


@router.get("", response_model=schemas.Page[schemas.GpuOut])
def list_gpus(
    _: Reader,
    runtime: RuntimeDep,
    page: Paging,
    node: Annotated[str | None, Query(max_length=253)] = None,
    present: bool | None = None,
) -> schemas.Page[object]:
    snap = runtime.snapshot()
    gpus = list(snap.gpus) if snap else []
    if node is not None:
        gpus = [g for g in gpus if g.sample.node == node]
    if present is not None:
        gpus = [g for g in gpus if g.present == present]
    return of_list(gpus, page, convert.gpu)
