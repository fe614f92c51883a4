"""kvpilot's own series for Prometheus (catalogue in ``api.series``). Unauthenticated like every exporter:
scrape it from inside the cluster; it carries no secrets."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from api.runtime import Runtime

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:
    # On the loop, without a (threaded) dependency: never queued behind threads a hung store holds. The snapshot's
    # gauges (12-15 ms of CPU at 10,000 replicas) were rendered by the tick in its worker thread; only the live
    # counters are rendered here (api.exposition.OwnMetrics.exposition).
    runtime: Runtime = request.app.state.runtime
    return Response(runtime.exposition(), media_type=CONTENT_TYPE_LATEST)
