"""Capacity profiles: what one replica of a deployment sustains within the SLO."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.fields import fit
from store.models import CapacityProfileRow
from store.repo.conflict import insert_or_skip


def upsert_capacity(
    *,
    session: Session,
    deployment: str,
    requests_per_s: float | None,
    tokens_per_s: float | None,
    source: str,
    now: float,
) -> CapacityProfileRow:
    if source not in ("observed", "configured"):
        raise ValueError(f"capacity source must be 'observed' or 'configured', got {source!r}")
    deployment = fit(deployment, 253)
    row = session.get(CapacityProfileRow, deployment)
    if row is None:  # a first observation, unless another kvpilot wrote one meanwhile (store.repo.conflict)
        first = insert_or_skip(session, CapacityProfileRow, [CapacityProfileRow.deployment])
        session.execute(first.values(deployment=deployment, source=source, observations=0, updated_at=now))
        row = session.scalars(select(CapacityProfileRow).where(CapacityProfileRow.deployment == deployment)).one()
    row.requests_per_s = requests_per_s
    row.tokens_per_s = tokens_per_s
    row.source = source
    row.observations = (row.observations or 0) + 1
    row.updated_at = now
    return row


def get_capacity(*, session: Session, deployment: str) -> CapacityProfileRow | None:
    return session.get(CapacityProfileRow, deployment)


def learned_capacities(*, session: Session, since: float) -> dict[str, tuple[float, float]]:
    """Per deployment, the learned (``observed``) capacity stored at or after ``since``: (requests/s, updated_at)."""
    rows = session.execute(
        select(CapacityProfileRow.deployment, CapacityProfileRow.requests_per_s, CapacityProfileRow.updated_at).where(
            CapacityProfileRow.source == "observed",
            CapacityProfileRow.updated_at >= since,
            CapacityProfileRow.requests_per_s.is_not(None),
        )
    )
    return {d: (float(rps), float(at)) for d, rps, at in rows if rps is not None}
