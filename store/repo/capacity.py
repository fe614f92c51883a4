"""Capacity profiles: what one replica of a deployment sustains within the SLO."""

from __future__ import annotations

from sqlalchemy.orm import Session

from store.fields import fit
from store.models import CapacityProfileRow


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
    if row is None:
        row = CapacityProfileRow(deployment=deployment, observations=0)
        session.add(row)
    row.requests_per_s = requests_per_s
    row.tokens_per_s = tokens_per_s
    row.source = source
    row.observations = (row.observations or 0) + 1
    row.updated_at = now
    return row


def get_capacity(*, session: Session, deployment: str) -> CapacityProfileRow | None:
    return session.get(CapacityProfileRow, deployment)
