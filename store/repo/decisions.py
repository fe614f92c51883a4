"""Decisions: one row per deployment per tick, the scaler's reasons kept for operators and for restarts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scaler.decision import Decision
from store.fields import fit
from store.models import DecisionRow
from store.repo.page import Page, paginate


def finite(values: Mapping[str, float]) -> dict[str, float]:
    """JSON (and PostgreSQL above all) has no NaN or infinity: unknown numbers are simply left out."""
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def _to_row(d: Decision) -> DecisionRow:
    fields = dataclasses.asdict(d)
    fields["forecast"] = finite(d.forecast)
    fields["deployment"] = fit(d.deployment, 253)
    fields["reason"] = fit(d.reason, 64)
    fields["message"] = fit(d.message, 10_000)
    return DecisionRow(**fields)


def to_decision(row: DecisionRow) -> Decision:
    return Decision(
        deployment=row.deployment,
        timestamp=row.timestamp,
        current_replicas=row.current_replicas,
        ready_replicas=row.ready_replicas,
        desired_replicas=row.desired_replicas,
        warm_pool=row.warm_pool,
        reason=row.reason,
        message=row.message,
        predictive_replicas=row.predictive_replicas,
        reactive_replicas=row.reactive_replicas,
        forecast={k: float(v) for k, v in (row.forecast or {}).items()},
    )


def record_decision(*, session: Session, decision: Decision) -> None:
    session.add(_to_row(decision))


def latest_decisions(*, session: Session) -> dict[str, Decision]:
    """The newest decision of every deployment: what a restarted kvpilot resumes from."""
    newest = (
        select(DecisionRow.deployment, func.max(DecisionRow.id).label("id")).group_by(DecisionRow.deployment).subquery()
    )
    rows = session.scalars(select(DecisionRow).join(newest, DecisionRow.id == newest.c.id))
    return {r.deployment: to_decision(r) for r in rows}


def list_decisions(
    *,
    session: Session,
    deployment: str | None = None,
    since: float | None = None,
    reason: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> Page[Decision]:
    """Newest first."""
    stmt = select(DecisionRow)
    if deployment is not None:
        stmt = stmt.where(DecisionRow.deployment == deployment)
    if since is not None:
        stmt = stmt.where(DecisionRow.timestamp >= since)
    if reason is not None:
        stmt = stmt.where(DecisionRow.reason == reason)
    stmt = stmt.order_by(DecisionRow.timestamp.desc(), DecisionRow.id.desc())
    rows, total = paginate(session, stmt, limit=limit, offset=offset)
    return Page([to_decision(r) for r in rows], total, limit, offset)
