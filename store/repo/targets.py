"""Static targets added through the API, so that they survive restarts."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from collector.samples import TargetInfo
from store.models import StaticTargetRow
from store.repo.conflict import insert_or_skip

# What a stored target keeps of a TargetInfo (the row's columns, beside who added it and when).
_STORED = ("url", "kind", "engine", "namespace", "deployment", "pod", "node")


def _to_target(row: StaticTargetRow) -> TargetInfo:
    return TargetInfo(**{k: getattr(row, k) for k in _STORED})


def list_static_targets(*, session: Session) -> list[TargetInfo]:
    return [_to_target(r) for r in session.scalars(select(StaticTargetRow).order_by(StaticTargetRow.url))]


def get_static_target(*, session: Session, url: str) -> TargetInfo | None:
    row = session.get(StaticTargetRow, url)
    return _to_target(row) if row is not None else None


def add_static_target(*, session: Session, target: TargetInfo, added_by: str, now: float) -> bool:
    """False when a target with this URL is already stored, also by another kvpilot on the same store at the same
    moment (its insert won: the primary key is the last word, as it was a 503 'store unavailable').

    One INSERT in the caller's transaction (``store.repo.conflict``): a savepoint before it committed the row on
    SQLite even when the caller's transaction then rolled back (a request past its deadline, answered 503 "nothing
    was applied"), and its audit row went in a transaction of its own."""
    if session.get(StaticTargetRow, target.url) is not None:
        return False
    stmt = (
        insert_or_skip(session, StaticTargetRow, [StaticTargetRow.url])
        .values(**{k: getattr(target, k) for k in _STORED}, added_by=added_by, added_at=now)
        .returning(StaticTargetRow.url)  # a row when inserted (an INSERT's rowcount reads -1 here)
    )
    return session.execute(stmt).first() is not None


def remove_static_target(*, session: Session, url: str) -> bool:
    """False when no target with this URL is stored (also when another kvpilot removed it a moment before)."""
    done = session.execute(delete(StaticTargetRow).where(StaticTargetRow.url == url))
    return bool(getattr(done, "rowcount", 0))
