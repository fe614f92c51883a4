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
                _postgres_lock(conn)
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


def _postgres_lock(conn: Connection) -> None:
    """The migration's advisory lock on PostgreSQL, waited for; the wait said once, naming the session that holds the
    lock, as the SQLite lock file's wait is said: a start held by another kvpilot's migration, or by a session left
    holding the lock (a migrator stopped with SIGSTOP, a hand-run `pg_advisory_lock`), waited without a word, its
    last line the embedded simulator's or the discovery's, and never became ready."""
    if not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _LOCK_KEY}).scalar():
        log.warning("waiting for the migration lock (PostgreSQL advisory lock %d): %s", _LOCK_KEY, _holder(conn))
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
    conn.commit()


def _holder(conn: Connection) -> str:
    """Who holds the migration's advisory lock, in words (its backend's pid, client, application and since when), as
    far as this role may read pg_stat_activity."""
    row = conn.execute(
        text(
            "SELECT l.pid, a.client_addr, a.application_name, a.backend_start FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND CAST(l.classid AS bigint) = :hi AND CAST(l.objid AS bigint) = :lo AND l.objsubid = 1 LIMIT 1"
        ),
        {"hi": _LOCK_KEY >> 32, "lo": _LOCK_KEY & 0xFFFFFFFF},
    ).first()
    conn.commit()
    if row is None or row.pid is None:
        return "another kvpilot is migrating this store"
    who = f"PostgreSQL backend {row.pid}"
    if row.client_addr is not None:
        who += f" from {row.client_addr}"
    if row.application_name:
        who += f" ({row.application_name!r})"
    if row.backend_start is not None:
        who += f", connected since {row.backend_start:%Y-%m-%d %H:%M:%S %Z}"
    return (
        f"another kvpilot is migrating this store, or a session holds the lock: {who} "
        f"(pg_terminate_backend({row.pid}) ends it if it is stuck)"
    )


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


def create_if_empty(url: str) -> str | None:
    """The schema created at head where the database holds none (its revision), else None: looked at under the
    migration lock, so that of two kvpilots that find one database empty (``kvpilot.runtime.wiring.schema_again``),
    the one that waited on the lock finds the other's schema and does not say it created it."""
    cfg = alembic_config(url)
    with _exclusive(url) as conn:
        if MigrationContext.configure(conn).get_current_revision() is not None:
            return None
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return head()


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
