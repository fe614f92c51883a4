"""Drain actions as an admin makes them through the API, written straight to a test's store."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from store import repo
from store.db import transaction


def admin_approved(sessions: sessionmaker[Session], node: str, now: float, *, dry_run: bool = False) -> int:
    """Request a drain of ``node`` as ``admin#0`` and approve it (one at a time); the action's id."""
    with transaction(sessions) as s:
        action = repo.request_drain(session=s, node=node, requested_by="admin#0", now=now, dry_run=dry_run)
        repo.approve_drain(session=s, action_id=action.id, actor="admin#0", now=now, max_concurrent=1)
        return action.id
