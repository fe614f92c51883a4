"""Engines and sessions for the store: one place that knows SQLite and PostgreSQL differ."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool


def make_engine(url: str, *, connect_timeout_s: float = 3.0) -> Engine:
    """An engine that fails fast when the database is away, so a tick never hangs on the store.

    SQLite: the parent folder is created, foreign keys enforced, WAL journal (readers do not block the loop's
    writer). PostgreSQL: a short connect timeout and pre-ping, so a restarted server is picked up again.
    """
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": connect_timeout_s}
        # A connection per use: opening the file is cheap, and a file that went away is noticed at once
        # instead of being written through a descriptor that still points at the old one.
        kwargs["poolclass"] = NullPool
    elif parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        kwargs["connect_args"] = {"connect_timeout": max(1, int(connect_timeout_s))}
        kwargs["pool_size"] = 5
    engine = create_engine(parsed, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with factory() as session, session.begin():
        yield session


def ping(engine: Engine) -> bool:
    """True when the database answers a trivial query now."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False
