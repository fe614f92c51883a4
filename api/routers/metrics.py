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
    # Without a (threaded) dependency: never queued behind threads a hung store holds. The page is rendered in a
    # thread of its own, the snapshot's gauges once per snapshot (api.exposition.OwnMetrics): the loop only sends it.
    runtime: Runtime = request.app.state.runtime
    return Response(await runtime.exposition(), media_type=CONTENT_TYPE_LATEST)
