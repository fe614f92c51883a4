"""Liveness and readiness. Ready means: one tick completed and the store reachable, so a Service sends traffic
only to a replica that has something true to say."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api import schemas
from api.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=dict[str, str])
def healthz() -> dict[str, str]:
    """The process is alive and serving HTTP."""
    return {"status": "ok"}


@router.get("/readyz", response_model=schemas.Health, responses={503: {"model": schemas.Health}})
def readyz(runtime: RuntimeDep) -> JSONResponse:
    h = runtime.health()
    checks = {"first_tick_done": h.first_tick_done, "store_reachable": h.store_up}
    ok = all(checks.values())
    body = schemas.Health(
        status="ok" if ok else "not ready",
        checks=checks,
        store_pending_writes=h.store_pending_writes,
        store_dropped_writes=h.store_dropped_writes,
        store_error=h.store_last_error,
        last_tick_at=h.last_tick_at,
        leader=h.leader,
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=200 if ok else 503)
