"""The store's schema history (Alembic) and the functions `kvpilot db` and the service use to apply it."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from store.db import make_engine

INI = Path(__file__).resolve().parent / "alembic.ini"


def alembic_config(url: str | None = None) -> Config:
    """Alembic's Config for migrations/alembic.ini, for the database at ``url`` (None: one that reads no database,
    such as ``head``'s)."""
    cfg = Config(str(INI))
    cfg.set_main_option("script_location", str(INI.parent))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


# pg_advisory_lock key: "kvpilot" in ASCII, so that replicas starting together migrate one at a time.
_LOCK_KEY = 0x6B7670696C6F74
log = logging.getLogger(__name__)


@contextmanager
def _sqlite_file_lock(url: str) -> Iterator[None]:
    """For a SQLite file, an exclusive ``flock`` on ``<file>-migrate-lock`` beside it: Alembic's SQLite DDL is not
    transactional, so two `kvpilot run` started together on one file raced ("table capacity_profiles already
    exists", exit 1). Nothing for other databases, or where the lock file cannot be made or locked (a read-only
    folder; NFS without its lock daemon answers ENOLCK): the migration then fails or succeeds on its own."""
    database = make_url(url).database if url.startswith("sqlite") else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    path = f"{database}-migrate-lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # said once, so that a start held by a stuck migrator is not silent
            log.warning("waiting for the migration lock %s: another kvpilot is migrating this store", path)
            with suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _exclusive(url: str) -> Iterator[Connection]:
    """A connection holding the migration lock. Several kvpilot replicas start at once in HA: without the lock
    two would race to create the same tables (PostgreSQL: an advisory lock; SQLite: a lock file)."""
    engine = make_engine(url, statement_timeout_s=None)  # on SQLite each migration one transaction, DDL included
    try:
        with _sqlite_file_lock(url), engine.connect() as conn:
            postgres = conn.dialect.name == "postgresql"
            if postgres:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
                conn.commit()
            try:
                yield conn
                conn.commit()
            finally:
                if postgres:
                    conn.rollback()
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
                    conn.commit()
    finally:
        engine.dispose()


class UnknownRevision(CommandError):
    """The database is at a revision these migrations do not hold: a newer kvpilot wrote it. (Alembic itself says
    only "Can't locate revision", as a traceback under `kvpilot run`.)"""


def _run(action: Callable[[Config, str], None], url: str, revision: str) -> None:
    cfg = alembic_config(url)
    with _exclusive(url) as conn:
        at = MigrationContext.configure(conn).get_current_revision()
        if at is not None and at not in revisions():
            raise UnknownRevision(
                f"the database is at schema revision {at!r}, which this kvpilot does not have (its newest is "
                f"{head()}): a newer kvpilot wrote it; run that version or a newer one, or step the schema down with "
                f"that version's `kvpilot db downgrade {head()}` (every instance stopped), or restore a backup"
            )
        cfg.attributes["connection"] = conn
        action(cfg, revision)


def upgrade(url: str, revision: str = "head") -> None:
    _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str = "-1") -> None:
    _run(command.downgrade, url, revision)


def revisions() -> set[str]:
    """Every revision these migrations hold."""
    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def head() -> str:
    script = ScriptDirectory.from_config(alembic_config())
    rev = script.get_current_head()
    if rev is None:
        raise RuntimeError("migrations/versions holds no revision")
    return rev


def current(url: str) -> str | None:
    """The revision the database is at, or None for an empty database."""
    engine = make_engine(url, statement_timeout_s=None)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def is_at_head(url: str) -> bool:
    return current(url) == head()
