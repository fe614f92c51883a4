"""Drain actions and their audit trail. Every transition goes through ``transition_drain``, which enforces the
state machine in ``store.drain_states`` and writes one ``drain_events`` row."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.drain_states import ACTIVE, DrainState, can_transition
from store.errors import InvalidTransition, NotFound
from store.models import DrainActionRow, DrainEventRow
from store.repo.page import Page, paginate


def request_drain(
    *,
    session: Session,
    node: str,
    requested_by: str,
    now: float,
    dry_run: bool,
    reason: str = "",
    finding_id: str | None = None,
    evidence: dict[str, Any] | None = None,
) -> DrainActionRow:
    """Open a drain request, unless one for the same node is already in flight (then that one is returned)."""
    if not node:
        raise ValueError("node must not be empty")
    existing = session.scalars(
        select(DrainActionRow).where(DrainActionRow.node == node, DrainActionRow.state.in_(list(ACTIVE)))
    ).first()
    if existing is not None:
        return existing
    row = DrainActionRow(
        node=node,
        state=DrainState.REQUESTED.value,
        dry_run=dry_run,
        requested_by=requested_by,
        requested_at=now,
        updated_at=now,
        reason=reason,
        finding_id=finding_id,
        evidence=evidence or {},
    )
    session.add(row)
    session.flush()
    session.add(
        DrainEventRow(action_id=row.id, at=now, from_state=None, to_state=row.state, actor=requested_by, message=reason)
    )
    return row


def get_drain(*, session: Session, action_id: int) -> DrainActionRow:
    row = session.get(DrainActionRow, action_id)
    if row is None:
        raise NotFound("drain action", action_id)
    return row


def transition_drain(
    *, session: Session, action_id: int, to: DrainState, actor: str, now: float, message: str = ""
) -> DrainActionRow:
    row = get_drain(session=session, action_id=action_id)
    current = DrainState(row.state)
    if not can_transition(current, to):
        raise InvalidTransition("drain action", action_id, current.value, to.value)
    row.state = to.value
    row.updated_at = now
    session.add(
        DrainEventRow(
            action_id=row.id, at=now, from_state=current.value, to_state=to.value, actor=actor, message=message
        )
    )
    return row


def count_active_drains(*, session: Session) -> int:
    stmt = (
        select(func.count())
        .select_from(DrainActionRow)
        .where(DrainActionRow.state.in_([DrainState.APPROVED.value, DrainState.EXECUTING.value]))
    )
    return int(session.scalar(stmt) or 0)


def list_drains(
    *, session: Session, state: str | None = None, node: str | None = None, limit: int = 100, offset: int = 0
) -> Page[DrainActionRow]:
    stmt = select(DrainActionRow)
    if state is not None:
        stmt = stmt.where(DrainActionRow.state == state)
    if node is not None:
        stmt = stmt.where(DrainActionRow.node == node)
    stmt = stmt.order_by(DrainActionRow.id.desc())
    rows, total = paginate(session, stmt, limit=limit, offset=offset)
    return Page(rows, total, limit, offset)


def list_drain_events(*, session: Session, action_id: int) -> list[DrainEventRow]:
    get_drain(session=session, action_id=action_id)
    return list(
        session.scalars(select(DrainEventRow).where(DrainEventRow.action_id == action_id).order_by(DrainEventRow.id))
    )


def note_drain(*, session: Session, action_id: int, actor: str, now: float, message: str) -> None:
    """Audit one step inside the current state (a cordon, an eviction, a retry) without changing the state."""
    row = get_drain(session=session, action_id=action_id)
    session.add(
        DrainEventRow(action_id=row.id, at=now, from_state=row.state, to_state=row.state, actor=actor, message=message)
    )


def latest_drain_for_node(*, session: Session, node: str) -> DrainActionRow | None:
    stmt = select(DrainActionRow).where(DrainActionRow.node == node).order_by(DrainActionRow.id.desc()).limit(1)
    return session.scalars(stmt).first()
