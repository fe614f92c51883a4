"""Liveness and readiness. Ready means: one tick completed and the store reachable (and, with
``keda.serve_from: process``, KEDA's server process serving), so a Service sends traffic only to a replica that
has something true to say."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api import schemas
from api.runtime import Runtime

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=dict[str, str])
async def healthz() -> dict[str, str]:
    """The process is alive and serving HTTP (on the event loop itself: a pool of worker threads held by a hung
    store cannot make it fail)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=schemas.Health, responses={503: {"model": schemas.Health}})
async def readyz(request: Request) -> JSONResponse:
    """Ready: a tick completed, the store answers and takes writes, and KEDA's own process (if it has one) serves.
    Unauthenticated, so ``store_error`` says
    what is wrong in words that name no host or port; the detail is in the log."""
    runtime: Runtime = request.app.state.runtime  # not a (threaded) dependency: see healthz
    h = runtime.health()
    checks = {"first_tick_done": h.first_tick_done, "store_reachable": h.store_up}
    if h.keda_serving is not None:  # KEDA's own process is between a death and its restart
        checks["keda_serving"] = h.keda_serving
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
