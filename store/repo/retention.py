"""Retention: history older than the horizon goes; live findings and unfinished drains stay whatever their age."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.orm import Session

from store.drain_states import ACTIVE
from store.models import DecisionRow, DrainActionRow, FindingRow, RollupRow


def prune(*, session: Session, now: float, horizon_s: float) -> dict[str, int]:
    """Delete what ended before ``now - horizon_s``; return the number of rows removed per table."""
    if horizon_s <= 0:
        raise ValueError(f"retention horizon must be > 0 s, got {horizon_s}")
    cutoff = now - horizon_s
    statements = {
        "decisions": delete(DecisionRow).where(DecisionRow.timestamp < cutoff),
        "findings": delete(FindingRow).where(FindingRow.state == "closed", FindingRow.closed_at < cutoff),
        "rollups": delete(RollupRow).where(RollupRow.minute < int(cutoff // 60)),
        "drain_actions": delete(DrainActionRow).where(
            DrainActionRow.state.not_in([s.value for s in ACTIVE]), DrainActionRow.updated_at < cutoff
        ),
    }
    counts: dict[str, int] = {}
    for table, stmt in statements.items():
        result = session.execute(stmt.execution_options(synchronize_session=False))
        counts[table] = int(getattr(result, "rowcount", 0) or 0)
    return counts
