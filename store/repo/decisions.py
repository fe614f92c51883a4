"""Decisions: one row per deployment per tick, the scaler's reasons kept for operators and for restarts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from scaler.decision import Decision
from store.fields import fit
from store.models import DecisionRow
from store.repo.page import KeysetPage, check_window


def finite(values: Mapping[str, object]) -> dict[str, float]:
    """JSON (and PostgreSQL above all) has no NaN or infinity: unknown numbers are simply left out (and so is an
    integer past a float's range, which only a row written by hand holds)."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, int | float):
            try:
                number = float(v)
            except OverflowError:
                continue
            if math.isfinite(number):
                out[k] = number
    return out


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
        # what a row another version (or a hand) wrote holds beside numbers is left out, as NaN is when written
        forecast=finite(row.forecast) if isinstance(row.forecast, dict) else {},
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
    after: tuple[float, int] | None = None,
) -> KeysetPage[Decision]:
    """Newest first, ``limit`` of them, starting after the position ``after`` (a page's ``next_after``).

    Ordered by (timestamp, id), which the timestamp index serves as it stands (SQLite keeps the row id in every
    index; PostgreSQL sorts only the ties of one timestamp), so a page reads its own rows and no more."""
    check_window(limit, 0)
    stmt = select(DecisionRow)
    if deployment is not None:
        stmt = stmt.where(DecisionRow.deployment == deployment)
    if since is not None:
        stmt = stmt.where(DecisionRow.timestamp >= since)
    if reason is not None:
        stmt = stmt.where(DecisionRow.reason == reason)
    if after is not None:
        t, row_id = after
        # the first term bounds the index range; the second cuts the rows of that timestamp already served
        stmt = stmt.where(DecisionRow.timestamp <= t, or_(DecisionRow.timestamp < t, DecisionRow.id < row_id))
    stmt = stmt.order_by(DecisionRow.timestamp.desc(), DecisionRow.id.desc()).limit(limit + 1)
    rows = list(session.scalars(stmt))
    more = len(rows) > limit
    rows = rows[:limit]
    return KeysetPage([to_decision(r) for r in rows], limit, (rows[-1].timestamp, rows[-1].id) if more else None)
