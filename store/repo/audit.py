"""Audit events for changes made through the API outside drains (drains keep theirs in ``drain_events``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.fields import fit
from store.models import AuditEventRow


def record_audit(*, session: Session, at: float, actor: str, action: str, subject: str, message: str = "") -> None:
    session.add(
        AuditEventRow(
            at=at,
            actor=fit(actor, 128),
            action=fit(action, 64),
            subject=fit(subject, 2048),
            message=fit(message, 10_000),
        )
    )


def list_audit(*, session: Session, limit: int = 100) -> list[AuditEventRow]:
    """Newest first."""
    return list(session.scalars(select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(limit)))
