"""Static targets added through the API, so that they survive restarts."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from collector.samples import TargetInfo
from store.models import StaticTargetRow


def _to_target(row: StaticTargetRow) -> TargetInfo:
    return TargetInfo(
        url=row.url,
        kind=row.kind,
        engine=row.engine,
        namespace=row.namespace,
        deployment=row.deployment,
        pod=row.pod,
        node=row.node,
    )


def list_static_targets(*, session: Session) -> list[TargetInfo]:
    return [_to_target(r) for r in session.scalars(select(StaticTargetRow).order_by(StaticTargetRow.url))]


def get_static_target(*, session: Session, url: str) -> TargetInfo | None:
    row = session.get(StaticTargetRow, url)
    return _to_target(row) if row is not None else None


def add_static_target(*, session: Session, target: TargetInfo, added_by: str, now: float) -> bool:
    """False when a target with this URL is already stored, also by another kvpilot on the same store at the same
    moment (its insert won: the primary key is the last word, as it was a 503 'store unavailable')."""
    if session.get(StaticTargetRow, target.url) is not None:
        return False
    row = StaticTargetRow(
        url=target.url,
        kind=target.kind,
        engine=target.engine,
        namespace=target.namespace,
        deployment=target.deployment,
        pod=target.pod,
        node=target.node,
        added_by=added_by,
        added_at=now,
    )
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        return False
    return True


def remove_static_target(*, session: Session, url: str) -> bool:
    """False when no target with this URL is stored (also when another kvpilot removed it a moment before)."""
    done = session.execute(delete(StaticTargetRow).where(StaticTargetRow.url == url))
    return bool(getattr(done, "rowcount", 0))
