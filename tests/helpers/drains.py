"""Drain actions as an admin makes them through the API, written straight to a test's store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from store import repo
from store.db import make_engine, session_factory, transaction

# Two kvpilots on one store, each with its own connection pool (a leader and the next one, two shards).
Pools = tuple[sessionmaker[Session], sessionmaker[Session]]


def admin_approved(sessions: sessionmaker[Session], node: str, now: float, *, dry_run: bool = False) -> int:
    """Request a drain of ``node`` as ``admin#0`` and approve it (one at a time); the action's id."""
    with transaction(sessions) as s:
        action = repo.request_drain(session=s, node=node, requested_by="admin#0", now=now, dry_run=dry_run)
        repo.approve_drain(session=s, action_id=action.id, actor="admin#0", now=now, max_concurrent=1)
        return action.id


@contextmanager
def two_pools(url: str) -> Iterator[Pools]:
    """``Pools`` on the store at ``url``, disposed after: waits bounded by a minute, so that a loaded machine does not
    fail a test."""
    engines = [make_engine(url, statement_timeout_s=60.0, pool_timeout_s=60.0) for _ in range(2)]
    try:
        yield session_factory(engines[0]), session_factory(engines[1])
    finally:
        for e in engines:
            e.dispose()
