"""Scrape targets with their health; static targets can be added and removed (admin)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.responses import JSONResponse, Response

from api import schemas
from api.deps import Admin, Paging, Reader, RuntimeDep, holders_store
from api.json_body import JSONBodyRoute
from api.paging import of_list
from collector.discovery.static import SameReplica
from collector.health import TargetHealth
from collector.samples import TargetInfo
from store.fields import redact_url

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/targets", tags=["targets"], route_class=JSONBodyRoute)


def _out(t: TargetInfo, health: TargetHealth | None, static: bool) -> schemas.TargetOut:
    return schemas.TargetOut(
        url=redact_url(t.url),
        kind=t.kind,
        engine=t.engine,
        namespace=t.namespace,
        deployment=t.deployment,
        pod=t.pod,
        node=t.node,
        static=static,
        up=health.up if health else None,
        last_error=health.last_error if health else None,
        last_scrape_ts=health.last_scrape_ts if health else None,
        last_scrape_duration_s=health.last_scrape_duration_s if health else None,
        consecutive_failures=health.consecutive_failures if health else 0,
        partial_pages_total=health.partial_pages_total if health else 0,
    )


@router.get("", response_model=schemas.Page[schemas.TargetOut])
def list_targets(_: Reader, runtime: RuntimeDep, page: Paging) -> schemas.Page[object]:
    snap = runtime.snapshot()
    static = {t.url: t for t in runtime.targets.static_targets()}
    # a target removed since the snapshot's tick is not listed: it would show as discovered (static false) till the next
    seen = {t.url: t for t in (snap.targets if snap else ()) if not runtime.targets.gone(t)}
    merged = {**seen, **static}
    health = snap.target_health if snap else {}
    items = [merged[u] for u in sorted(merged)]
    return of_list(items, page, lambda t: _out(t, health.get(t.url), t.url in static))


@router.post(
    "",
    response_model=schemas.TargetOut,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": schemas.TargetOut, "description": "already present"}, 409: {"model": schemas.Error}},
    dependencies=[Depends(holders_store)],  # added to a follower's own SQLite, only that follower would scrape it
)
def add_target(body: schemas.TargetIn, who: Admin, runtime: RuntimeDep) -> JSONResponse:
    target = TargetInfo(**body.model_dump())
    try:
        created = runtime.targets.add(target, by=who.name)
    except SameReplica as e:  # two pages under one pod would be read as one replica
        raise HTTPException(status.HTTP_409_CONFLICT, str(e)) from None
    if created:
        log.info(
            "audit: %s added target %s (%s/%s)", who.name, redact_url(target.url), target.namespace, target.deployment
        )
    out = _out(target, None, True).model_dump(mode="json")
    return JSONResponse(out, status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


@router.delete(
    "",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: {"model": schemas.Error}, 409: {"model": schemas.Error}},
    dependencies=[Depends(holders_store)],
)
def remove_target(
    who: Admin, runtime: RuntimeDep, url: Annotated[str, Query(min_length=1, max_length=2048)]
) -> Response:
    try:
        removed = runtime.targets.remove(url, by=who.name)
    except ValueError as e:  # defined in the configuration file
        raise HTTPException(status.HTTP_409_CONFLICT, str(e)) from None
    if not removed:  # a target found by discovery (a static_file, Kubernetes, PromQL) is removed there
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"static target {redact_url(url)!r} not found: only targets added through the API are removed here; one"
            " found by discovery (collector.discovery: a static_file, a pod's labels, the PromQL source) is removed"
            " there",
        )
    log.info("audit: %s removed target %s", who.name, redact_url(url))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
