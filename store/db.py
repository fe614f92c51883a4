"""Engines and sessions for the store: one place that knows SQLite and PostgreSQL differ."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool

from collector.urls import password_masked
from store import writers
from store.errors import DeadlinePassed

log = logging.getLogger(__name__)


def json_loads(stored: str | bytes) -> Any:
    """A JSON column's value as ``json.loads`` reads it (SQLAlchemy's default), but one the decoder cannot read as
    null, said: nested past its recursion (about 1,000 levels), a number of more digits than Python converts (4,300;
    PostgreSQL's jsonb keeps any), text that is no JSON (SQLite's JSON column is text). kvpilot writes flat objects,
    and every reader of its JSON columns takes null as none (evidence, a forecast, an instance's nodes). A row a hand
    or another program wrote so costs only itself: the decoder's error failed the whole query it came in, every
    start (restore reads the open findings and the latest decisions), the page it was on, the drain breaker's read
    of the instances' nodes."""
    try:
        return json.loads(stored)
    except RecursionError:
        log.warning("a stored JSON value nested too deeply to read (%d characters) is read as null", len(stored))
    except ValueError as e:  # json.JSONDecodeError, the integer digits limit; the value itself is never shown
        why = f"{e.msg} at character {e.pos}" if isinstance(e, json.JSONDecodeError) else str(e).split(":")[0]
        log.warning("a stored JSON value that is not JSON kvpilot reads (%s; %d characters) is read as null", why,
                    len(stored))  # fmt: skip
    return None


class StoreConfigError(ValueError):
    """The database URL cannot be used at all (garbage, unknown driver): a one-line message for the operator."""


def make_engine(
    url: str,
    *,
    connect_timeout_s: float = 3.0,
    statement_timeout_s: float | None = 5.0,
    pool_timeout_s: float = 5.0,
) -> Engine:
    """An engine that fails fast when the database is away or stuck, so no caller waits on it unbounded.

    SQLite: the parent folder is created, foreign keys enforced, WAL journal, each transaction one SQLite
    transaction from its first statement (BEGIN IMMEDIATE: ``_sqlite_transactions``), and a busy timeout of
    ``statement_timeout_s`` (a lock held by another connection fails the statement then, instead of waiting
    forever); connections pooled, each handed out only while the path still names the file it opened. PostgreSQL: a
    short connect timeout, pre-ping (a restarted server is picked up again), ``statement_timeout`` and
    ``lock_timeout`` on every session, and a bounded wait for a pooled connection. ``statement_timeout_s=None``
    (migrations: an index build or another replica's migration lock may take longer) sets no statement timeout. A
    server that stops answering altogether (SIGSTOP) is bounded by the callers, which run store calls in threads
    with their own deadlines (``kvpilot.runtime.service``, ``api``).
    """
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except Exception as e:  # sqlalchemy raises ArgumentError, but a stray ValueError is as likely
        raise StoreConfigError(f"database URL {url_shown(url)!r} is not a URL SQLAlchemy understands: {e}") from None
    if backend not in ("sqlite", "postgresql"):
        raise StoreConfigError(f"database URL {url_shown(url)!r}: only sqlite:/// and postgresql:// are supported")
    if backend == "sqlite" and (parsed.database or "").startswith("file:"):
        # a URI filename (with ?uri=true): the checks on the file below would stat "file:..." and refuse every
        # connection ("This connection is closed"); kvpilot writes its store, so ?mode=ro has no use either
        raise StoreConfigError(
            f"database URL {url_shown(url)!r}: SQLite URI filenames (file:...) are not supported; give the file's "
            "path, e.g. sqlite:////var/lib/kvpilot/kvpilot.db"
        )
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "json_deserializer": json_loads}
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            try:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreConfigError(
                    f"cannot create the folder for the SQLite store {parsed.database}: {e.strerror or e}"
                ) from None
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": statement_timeout_s or 60.0}
        if parsed.database and parsed.database != ":memory:":
            # Pooled, as SQLAlchemy pools a SQLite file by default: a connection per use cost every API read an
            # open, two PRAGMAs and a fresh page cache. _same_file keeps what that bought: a file that went away
            # or was replaced is noticed at the next checkout, not written through a descriptor to the old one.
            kwargs["poolclass"] = QueuePool
            kwargs["pool_size"] = 5
            kwargs["pool_timeout"] = pool_timeout_s
    else:
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        ms = max(1, int((statement_timeout_s or 0) * 1000))
        kwargs["connect_args"] = {
            "connect_timeout": max(1, int(connect_timeout_s)),
        }
        if statement_timeout_s is not None:
            # the URL's own libpq options (a search_path, an application setting) are kept: connect_args would
            # replace them. Ours go first, so a timeout the URL sets itself wins (PostgreSQL applies -c in order).
            own = parsed.query.get("options") or ()
            own = (own,) if isinstance(own, str) else own
            kwargs["connect_args"]["options"] = " ".join((f"-c statement_timeout={ms} -c lock_timeout={ms}", *own))
        kwargs["pool_size"] = 5
        kwargs["pool_timeout"] = pool_timeout_s
    try:
        engine = create_engine(parsed, **kwargs)
    except Exception as e:  # a driver that is not installed, an option it refuses
        raise StoreConfigError(f"database URL {url_shown(url)!r}: {str(e).splitlines()[0]}") from None
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        _sqlite_transactions(engine)
        writers.install(engine, wait_s=statement_timeout_s or 60.0)
        if parsed.database and parsed.database != ":memory:":
            _check_same_file(engine, parsed.database)
            _reopen_read_only(engine)
    return engine


# The WAL file cut back to this once a checkpoint has emptied it. SQLite keeps it at its largest size otherwise: a
# reader holding a read transaction (an operator's sqlite3 shell, a backup) stops checkpoints, and the WAL grows with
# every commit meanwhile (4 KB or more each; kvpilot commits every tick), then stayed that size for good once the
# reader was gone (13.2 MB after 3,000 commits, measured). Normal use stays under SQLite's 1,000-page checkpoint.
WAL_SIZE_LIMIT_BYTES = 8 << 20


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
    cur.close()


def _sqlite_transactions(engine: Engine) -> None:
    """Each transaction on ``engine`` one SQLite transaction from its first statement: SQLAlchemy's recipe for
    pysqlite ("Transactions with SQLite and the sqlite3 driver"), the driver's own BEGIN off and one emitted at each
    SQLAlchemy begin. (Its other recipe, ``connect_args={"autocommit": False}``, needs Python 3.12 and opens a
    transaction at connect, where the WAL pragma cannot run.)

    Python's sqlite3 module (legacy transaction control, its default through Python 3.15) begins a transaction only
    before an INSERT, UPDATE or DELETE. So a savepoint opened before a transaction's first write (``begin_nested``)
    began the transaction itself and its RELEASE committed it: a rollback of the enclosing transaction (a request past
    its deadline, a later step failing) left the savepoint's rows stored. Reads before the first write ran outside
    the transaction, each on a snapshot of its own; each DDL statement of a migration committed on its own (a process
    killed between two CREATE TABLEs left tables without their alembic_version row), so migrations now apply whole.

    BEGIN IMMEDIATE, not BEGIN: a transaction takes the write lock when it begins, waiting for it as for any busy
    store (the busy timeout). A deferred BEGIN fails a transaction that reads, then writes after another connection
    committed, with "database is locked" at once (SQLITE_BUSY_SNAPSHOT, no wait): the store's two-writer tests failed
    9 of 73 that way (14 "database is locked"), 0 with BEGIN IMMEDIATE. The cost, for a transaction that only reads:
    it would wait for a writing one to end (at most the busy timeout); so one begun ``READS_ONLY`` (``transaction(...,
    reads_only=True)``: the API's GETs, the probe) begins deferred and does not wait."""

    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        reads_only = bool(conn.get_execution_options().get(READS_ONLY))
        if conn.info.get(READS_ONLY, False) != reads_only:  # the DBAPI connection's flag, kept while it is pooled
            conn.exec_driver_sql(f"PRAGMA query_only={'ON' if reads_only else 'OFF'}")
            conn.info[READS_ONLY] = reads_only
        conn.exec_driver_sql("BEGIN" if reads_only else "BEGIN IMMEDIATE")


# An execution option for a connection whose transaction only reads: on SQLite it begins deferred (BEGIN), so it
# does not wait for a writer's lock, and under PRAGMA query_only, so a write in it fails at once, always ("attempt to
# write a readonly database"), not only when another connection committed first (SQLITE_BUSY_SNAPSHOT, "database
# is locked"). Nothing elsewhere (PostgreSQL readers never wait for writers).
READS_ONLY = "kvpilot_reads_only"


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _check_same_file(engine: Engine, path: str) -> None:
    """A pooled SQLite connection is handed out only while its path still names the file it opened; otherwise the
    pool opens a new one, which fails at once if the file or its folder is gone (the store is then 'away')."""

    def opened(_conn: Any, record: ConnectionPoolEntry) -> None:
        record.info["file"] = _file_identity(path)

    def checked_out(_conn: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        opened_file = record.info.get("file")
        if opened_file is None or opened_file != _file_identity(path):
            raise DisconnectionError(f"the SQLite file {path} was moved, replaced or removed")

    event.listen(engine, "connect", opened)
    event.listen(engine, "checkout", checked_out)


def _reopen_read_only(engine: Engine) -> None:
    """A pooled SQLite connection that says it cannot write ("attempt to write a readonly database") outside a
    read-only unit is dropped, and the next use opens the file again. SQLite opens a file it cannot open for writing
    (a volume remounted read-only, a file made immutable or, for a kvpilot not run as root, one whose mode was changed)
    read-only, without a word, and the connection stays read-only when the file can be written again: measured with
    `kvpilot run` on a file made immutable for a minute, then writable, the pool kept the connections opened
    meanwhile, and writes failed on them for good ("store unreachable" and "reachable again" every few seconds, one
    POST in six a 503) until a restart. Marked as a disconnect, the error keeps the writes buffered as before."""

    @event.listens_for(engine, "handle_error")
    def _read_only(ctx: ExceptionContext) -> None:
        e = ctx.original_exception
        if not isinstance(e, sqlite3.OperationalError) or "readonly database" not in str(e):
            return
        conn = ctx.connection
        if conn is not None and not conn.invalidated and conn.info.get(READS_ONLY, False):
            return  # a write in a read-only unit (PRAGMA query_only): its own error, not the file's
        ctx.is_disconnect = True


def url_shown(url: str) -> str:
    """The store's URL as kvpilot shows it (messages, log lines, ``kvpilot db``): without a password, whether in its
    ``user:password@`` or in a libpq ``password=``/``sslpassword=`` query parameter (``password_masked``; best effort
    on a URL that does not parse)."""
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:
        shown = url.split("@")[-1] if "@" in url else url
    return password_masked(shown)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


# When the request being served stops mattering (its client got a 503 for the timeout): a transaction that reaches
# its COMMIT after this rolls back instead, so a request the client saw fail is not applied later.
request_deadline: ContextVar[float | None] = ContextVar("request_deadline", default=None)


@contextmanager
def transaction(factory: sessionmaker[Session], *, reads_only: bool = False) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error or when the request's deadline has passed.
    ``reads_only``: a unit that only reads (the API's GETs); on SQLite it does not wait for a writer (``READS_ONLY``)
    and a write in it fails. One that writes waits its turn at SQLite's writer gate first (``store.writers``): in
    order, behind the service's own writes when it serves a request."""
    turn = nullcontext() if reads_only else writers.writers_turn(factory, deadline=request_deadline.get())
    with turn, factory() as session, session.begin():
        if reads_only:
            session.connection(execution_options={READS_ONLY: True})
        yield session
        deadline = request_deadline.get()
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlinePassed("the request timed out before its change was committed; nothing was applied")


def ping(engine: Engine) -> bool:
    """True when the database answers a trivial query now (on SQLite without waiting for a writer's lock: the store
    probe asks whether the store answers, and a long write of another kvpilot is no outage)."""
    try:
        with engine.connect() as conn:
            conn.execution_options(**{READS_ONLY: True}).execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False
