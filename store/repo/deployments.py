"""Deployments kvpilot has seen (first and last sighting), so the API can list ones that are gone now."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.fields import fit, fit_optional
from store.models import DeploymentRow
from store.repo.conflict import insert_or_skip
from store.repo.page import Page, paginate


@dataclass(frozen=True, slots=True)
class SeenDeployment:
    key: str  # "namespace/name"
    engine: str | None = None
    model: str | None = None


def upsert_deployments(*, session: Session, seen: Iterable[SeenDeployment], now: float) -> None:
    """Values come from scraped pages: each is fitted to its column here, so one over-long model name cannot
    fail the write for every deployment."""
    wanted = {fit(d.key, 253): SeenDeployment(fit(d.key, 253), fit_optional(d.engine, 32), fit_optional(d.model, 255))
              for d in seen}  # fmt: skip
    if not wanted:
        return
    rows = {r.key: r for r in session.scalars(select(DeploymentRow).where(DeploymentRow.key.in_(list(wanted))))}
    new = [d for key, d in wanted.items() if key not in rows]
    if new:  # first sightings, unless another kvpilot wrote one meanwhile (store.repo.conflict): read back
        session.execute(
            insert_or_skip(session, DeploymentRow, [DeploymentRow.key]), [_first_sighting(d, now) for d in new]
        )
        fresh = select(DeploymentRow).where(DeploymentRow.key.in_([d.key for d in new]))
        rows.update((r.key, r) for r in session.scalars(fresh))
    for key, d in wanted.items():
        row = rows[key]
        row.last_seen = now
        row.engine = d.engine or row.engine
        row.model = d.model or row.model


def _first_sighting(d: SeenDeployment, now: float) -> dict[str, object]:
    ns, _, name = d.key.partition("/")
    return {
        "key": d.key,
        "namespace": fit(ns, 63),
        "name": fit(name, 189),
        "engine": d.engine,
        "model": d.model,
        "first_seen": now,
        "last_seen": now,
    }


def list_deployments(*, session: Session, limit: int = 100, offset: int = 0) -> Page[DeploymentRow]:
    rows, total = paginate(session, select(DeploymentRow).order_by(DeploymentRow.key), limit=limit, offset=offset)
    return Page(rows, total, limit, offset)


def get_deployment(*, session: Session, key: str) -> DeploymentRow | None:
    return session.get(DeploymentRow, key)


def all_deployments(*, session: Session) -> list[DeploymentRow]:
    """Every remembered deployment (one row per deployment: small even for large fleets)."""
    return list(session.scalars(select(DeploymentRow).order_by(DeploymentRow.key)))
