"""Deployments: the live view merged with every deployment the store remembers, and one deployment's detail
(state, decision with its reasons and forecast, replicas, live findings)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api import convert, schemas
from api.deps import Paging, Reader, RuntimeDep, SessionsDep
from api.handoff import in_thread
from api.paging import of_list
from store import repo
from store.db import transaction
from store.errors import NotFound

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])

# A disaggregated deployment's pool is addressed as name@prefill or name@decode (collector.roles.pool_key).
Name = Annotated[
    str,
    Path(min_length=1, max_length=261, pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9._]*[a-zA-Z0-9])?(@(prefill|decode))?$"),
]


@router.get("", response_model=schemas.Page[schemas.DeploymentSummary])
@in_thread
def list_deployments(_: Reader, runtime: RuntimeDep, sessions: SessionsDep, page: Paging) -> schemas.Page[object]:
    snap = runtime.snapshot()
    live = dict(snap.deployments) if snap else {}
    decisions = dict(snap.decisions) if snap else {}
    costs = dict(snap.costs) if snap else {}
    with transaction(sessions, reads_only=True) as s:
        rows = {r.key: r for r in repo.all_deployments(session=s)}
    keys = sorted(set(live) | set(rows))
    return of_list(
        keys, page, lambda k: convert.deployment(k, live.get(k), rows.get(k), decisions.get(k), costs.get(k))
    )


@router.get("/{namespace}/{name}", response_model=schemas.DeploymentDetail, responses={404: {"model": schemas.Error}})
@in_thread
def get_deployment(
    namespace: Name, name: Name, _: Reader, runtime: RuntimeDep, sessions: SessionsDep
) -> schemas.DeploymentDetail:
    key = f"{namespace}/{name}"
    snap = runtime.snapshot()
    view = snap.deployments.get(key) if snap else None
    dec = snap.decisions.get(key) if snap else None
    with transaction(sessions, reads_only=True) as s:
        row = repo.get_deployment(session=s, key=key)
        if view is None and row is None:
            raise NotFound("deployment", key)
        if dec is None:
            dec = repo.latest_decisions(session=s).get(key)
        findings = repo.list_findings(session=s, deployment=key, state="open", limit=1000).items
        findings = [*findings, *repo.list_findings(session=s, deployment=key, state="acknowledged", limit=1000).items]
        found = [convert.finding(f) for f in findings]
    return schemas.DeploymentDetail(
        deployment=convert.deployment(key, view, row, dec, snap.costs.get(key) if snap else None),
        decision=convert.decision(dec) if dec else None,
        replicas=[convert.replica(r) for r in view.replicas] if view else [],
        findings=found,
    )


@router.get(
    "/{namespace}/{name}/history",
    response_model=schemas.Page[schemas.HistoryPoint],
    responses={404: {"model": schemas.Error}},
)
@in_thread
def get_history(
    namespace: Name,
    name: Name,
    _: Reader,
    sessions: SessionsDep,
    page: Paging,
    since: Annotated[float, Query(ge=0, le=1e11, description="epoch seconds")] = 0.0,
) -> schemas.Page[object]:
    """Per-minute roll-ups of the deployment's signals, oldest first: what the forecaster trains on. A deployment
    whose minutes only a gateway's counter filled (``collector.arrivals``: at zero replicas, never seen by the
    collector) has roll-ups and no deployment row: its minutes are served too."""
    key = f"{namespace}/{name}"
    with transaction(sessions, reads_only=True) as s:
        points = repo.load_rollups(session=s, deployment=key, since=since)
        if not points and repo.get_deployment(session=s, key=key) is None:
            known = repo.load_rollups(session=s, deployment=key) if since else []
            if not known:
                raise NotFound("deployment", key)
    return of_list(points, page, lambda p: schemas.HistoryPoint(t=p.t, samples=p.samples, values=dict(p.values)))
