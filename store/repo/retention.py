"""Retention: history older than the horizon goes; live findings, unfinished drains and the drains a drain budget still
counts stay whatever their age."""

from __future__ import annotations

import math

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from store.drain_states import ACTIVE, DrainState
from store.models import DecisionRow, DrainActionRow, DrainEventRow, FindingRow, RollupRow


def prune(*, session: Session, now: float, horizon_s: float, drains_kept_s: float = 0.0) -> dict[str, int]:
    """Delete what ended before ``now - horizon_s``; return the number of rows removed per table.

    ``drains_kept_s``: a drain that started executing within this many seconds before ``now`` is kept, with its
    events, whatever the horizon (``drains.budget_window_s``: ``count_budget_drains`` counts it from its events).
    Before, a ``store.retention_days`` shorter than the window deleted a drain done 13 h before while the budget still
    counted it, and the budget let a second drain through the same day."""
    if horizon_s <= 0:
        raise ValueError(f"retention horizon must be > 0 s, got {horizon_s}")
    # Nothing is stamped before the epoch: a horizon reaching past it keeps everything. Before, the roll-ups' cutoff
    # minute was an integer past 64 bits (store.retention_days 1e300) or NaN (1e308 days: an infinite horizon), and the
    # retention write failed at every pass, dropped with an ERROR.
    cutoff = max(now - horizon_s, 0.0)
    finished = [DrainActionRow.state.not_in([s.value for s in ACTIVE]), DrainActionRow.updated_at < cutoff]
    if drains_kept_s > 0:
        since = max(now - drains_kept_s, 0.0)
        counted = select(DrainEventRow.action_id).where(
            DrainEventRow.to_state == DrainState.EXECUTING.value, DrainEventRow.at >= since
        )
        finished.append(DrainActionRow.id.not_in(counted))
    statements = {
        "decisions": delete(DecisionRow).where(DecisionRow.timestamp < cutoff),
        "findings": delete(FindingRow).where(FindingRow.state == "closed", FindingRow.closed_at < cutoff),
        "rollups": delete(RollupRow).where(RollupRow.minute < int(cutoff // 60)),
        "drain_actions": delete(DrainActionRow).where(*finished),
    }
    counts: dict[str, int] = {}
    for table, stmt in statements.items():
        result = session.execute(stmt.execution_options(synchronize_session=False))
        counts[table] = int(getattr(result, "rowcount", 0) or 0)
    return counts


def newest_stored(*, session: Session, before: float) -> float | None:
    """The time of the newest row stamped before ``before`` (a decision, a roll-up of a minute before ``before``'s, a
    finding's last sighting, a drain's last change), None if there is none: how recent the history a process found at
    its start is."""
    stamps = (
        select(func.max(DecisionRow.timestamp)).where(DecisionRow.timestamp < before),
        select(func.max(RollupRow.minute) * 60).where(RollupRow.minute < math.floor(before / 60)),  # minutes before
        select(func.max(FindingRow.last_seen)).where(FindingRow.last_seen < before),
        select(func.max(DrainActionRow.updated_at)).where(DrainActionRow.updated_at < before),
    )
    found = [session.scalar(stmt) for stmt in stamps]
    return max((float(t) for t in found if t is not None), default=None)
