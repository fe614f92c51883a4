"""The write buffer between the control loop and the database.

The loop must keep deciding when the store is away: it submits each write here and carries on. ``flush`` applies
what is pending in order, in bounded transactions. A connectivity error keeps everything for the next flush; the
buffer is bounded, and when full the oldest write goes (counted in ``dropped_total``) because the newest state is
what a restart needs. A write that fails for any other reason (a bug, a constraint) is dropped alone and counted in
``failed_total``, so one bad row cannot wedge the store forever.

"Any other reason" is decided by asking the database, not by error classes: a lock held elsewhere (SQLite's
"database is locked", PostgreSQL's lock or statement timeout), a read-only or full database, or one that no
longer answers, keeps every write for later; only when a trivial write (the canary) still succeeds is the failing
write the row's own fault. ``in_flight_s`` says how long the current flush has been running, so readiness can
tell a store that hangs (a stopped server answers nothing, not even an error) from one that is merely slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from store.errors import driver_words
from store.writers import writers_turn

log = logging.getLogger(__name__)

Write = Callable[[Session], None]

# The number of writes the session's transaction applies (``Session.info``; 1 for a write applied alone): how far
# ahead a write may read rows for the writes after it in the same batch (``kvpilot.runtime.persist``'s roll-ups).
WRITES_IN_BATCH = "kvpilot.writes_in_batch"


@dataclass(frozen=True, slots=True)
class _Pending:
    label: str
    write: Write


# A batch whose PostgreSQL transaction may have committed though its COMMIT got no answer (the connection cut after
# the server took it: a failover, a proxy, the network): settled by the transaction's status before it is applied
# again. Before, it was applied again at once: measured behind a proxy that cut 5 such answers in 40 ticks, the
# minute roll-ups held 45 samples (each cut batch applied twice). "in progress" (the server has not yet seen the cut)
# is waited on this long, then the batch is applied again as before.
IN_DOUBT_WAIT_S = 30.0


@dataclass(slots=True)
class _InDoubt:
    batch: list[_Pending]
    xid: int
    since: float  # time.monotonic()


def _database_answers(factory: sessionmaker[Session]) -> bool:
    try:
        with writers_turn(factory), factory() as session:  # on SQLite, a transaction of its own (BEGIN IMMEDIATE)
            session.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False


# Messages of errors that say "not now" rather than "not this row" (SQLite, PostgreSQL), matched lower-case.
_TRANSIENT = (
    "database is locked",
    "database table is locked",
    "busy",
    "statement timeout",
    "lock timeout",
    "canceling statement",
    "read-only",
    "readonly",
    "disk i/o error",
    "database or disk is full",
    "no space left",
)


def _write_path_works(factory: sessionmaker[Session]) -> bool:
    """A canary write (the drain rail's row, unchanged) commits: the store takes writes now."""
    try:
        with writers_turn(factory), factory() as session, session.begin():
            session.execute(text("UPDATE drain_rail SET claims = claims WHERE id = 1"))
        return True
    except SQLAlchemyError:
        return False


def is_connectivity_error(e: BaseException, factory: sessionmaker[Session]) -> bool:
    """True for "the store cannot take writes now" as opposed to "this write is wrong".

    Drivers disagree on error classes (SQLite raises OperationalError for a missing table too), so beyond a few
    well-known "not now" messages the database is asked directly: if it answers a trivial query and takes a
    trivial write, the write itself was at fault.
    """
    if isinstance(e, DBAPIError) and e.connection_invalidated:
        return True
    message = str(getattr(e, "orig", None) or e).lower()
    if any(m in message for m in _TRANSIENT):
        return True
    return not (_database_answers(factory) and _write_path_works(factory))


def lock_holders(factory: sessionmaker[Session]) -> str:
    """On PostgreSQL, after a write waited out its statement or lock timeout: the other sessions holding more than a
    read lock on this database's tables from a transaction left open (idle in it, or open for over 5 s), in words,
    as far as this role may read pg_stat_activity; "" when none is seen, elsewhere, or when it cannot be read. Before,
    a table locked by an operator's psql left inside BEGIN read only "store unreachable ... statement timeout" while
    PostgreSQL answered, with nothing to say whose session to end."""
    try:
        with factory() as session:
            if session.get_bind().dialect.name != "postgresql":
                return ""
            rows = session.execute(
                text(
                    "SELECT a.pid, a.usename, a.application_name, a.client_addr, a.state, "
                    "CAST(EXTRACT(EPOCH FROM now() - a.xact_start) AS float) AS open_s, "
                    "string_agg(DISTINCT CAST(l.relation::regclass AS text), ', ') AS tables "
                    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.granted AND l.relation IS NOT NULL AND l.mode <> 'AccessShareLock' "
                    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL "
                    "AND (a.state LIKE 'idle in transaction%' OR a.xact_start < now() - interval '5 seconds') "
                    "GROUP BY a.pid, a.usename, a.application_name, a.client_addr, a.state, a.xact_start "
                    "ORDER BY a.xact_start LIMIT 3"
                )
            ).all()
    except SQLAlchemyError:
        return ""
    said = []
    for r in rows:
        who = f"PostgreSQL backend {r.pid}"
        if r.usename:
            who += f" (user {r.usename!r}"
            who += f", {r.application_name!r})" if r.application_name else ")"
        if r.client_addr is not None:
            who += f" from {r.client_addr}"
        said.append(
            f"{who}, {r.state or 'in a transaction'} for {r.open_s or 0:.0f} s, locking {r.tables} "
            f"(pg_terminate_backend({r.pid}) ends it)"
        )
    return "; a session holds locks on the store's tables: " + "; ".join(said) if said else ""


class BufferedWriter:
    def __init__(self, factory: sessionmaker[Session], *, max_pending: int, chunk: int = 500) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self._factory = factory
        self._pending: deque[_Pending] = deque()
        self._max = max_pending
        self._chunk = chunk
        self._lock = threading.Lock()  # submit() runs on the loop, flush() in a worker thread
        self._flush_lock = threading.Lock()
        self.dropped_total = 0
        self.failed_total = 0
        self.written_total = 0
        self.up = True
        self.last_error: str | None = None
        self._flush_started: float | None = None  # time.monotonic() of the flush now running
        self._in_doubt: _InDoubt | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def lost_total(self) -> int:
        """Writes that never reached the store: dropped from a full buffer, or refused as bad rows."""
        return self.dropped_total + self.failed_total

    def in_flight_s(self) -> float:
        """How long the flush now running has been at it (0 when none is)."""
        started = self._flush_started
        return 0.0 if started is None else time.monotonic() - started

    def submit(self, label: str, write: Write) -> None:
        self.submit_all([(label, write)])

    def submit_all(self, writes: Sequence[tuple[str, Write]]) -> None:
        """Queue ``writes`` in one step: a flush takes them whole (up to its chunk) or not at all. Before, the loop
        queued a tick's writes one by one while the writer thread flushed the earlier ones, and a flush could take
        half a tick: the minute's roll-up rows read once for the tick were read again one by one in the next batch
        (test_loop_rollups, 48 reads where 40 were bounded, under load)."""
        pending = [_Pending(label, write) for label, write in writes]
        with self._lock:
            for p in pending:
                if len(self._pending) >= self._max:
                    dropped = self._pending.popleft()
                    self.dropped_total += 1
                    log.warning("store buffer full (%d writes): dropped the oldest, %s", self._max, dropped.label)
                self._pending.append(p)

    def flush(self) -> bool:
        """Apply pending writes in order; return True when nothing is left pending."""
        with self._flush_lock:
            self._flush_started = time.monotonic()
            try:
                return self._flush_locked()
            finally:
                self._flush_started = None

    def _flush_locked(self) -> bool:
        while True:
            if self._in_doubt is not None:
                try:
                    if self._settle_in_doubt():
                        return False
                except SQLAlchemyError as e:
                    if is_connectivity_error(e, self._factory):
                        self._mark_down(e)
                        return False
                    # a server that cannot say (txid_status is PostgreSQL 10's): applied again, as before
                    log.warning("store: cannot tell whether a COMMIT that got no answer went through: %s", _cause(e))
                    self._in_doubt = None
            with self._lock:
                batch = [self._pending[i] for i in range(min(self._chunk, len(self._pending)))]
            if not batch:
                return True
            try:
                try:
                    self._apply(batch)
                    self._done(batch)
                except Exception as e:
                    if isinstance(e, SQLAlchemyError) and is_connectivity_error(e, self._factory):
                        raise
                    self._apply_one_by_one(batch)
            except SQLAlchemyError as e:
                self._mark_down(e)
                return False
            self._mark_up()

    def _done(self, batch: list[_Pending]) -> None:
        """Forget ``batch``, applied or given up on (a full buffer may have dropped part of it meanwhile)."""
        done = {id(p) for p in batch}
        with self._lock:
            kept = [p for p in self._pending if id(p) not in done]
            if len(kept) != len(self._pending):
                self._pending = deque(kept)

    def _apply(self, batch: list[_Pending]) -> None:
        xid: int | None = None
        try:
            with writers_turn(self._factory), self._factory() as session, session.begin():
                session.info[WRITES_IN_BATCH] = len(batch)
                if session.get_bind().dialect.name == "postgresql":
                    xid = int(session.execute(text("SELECT txid_current()")).scalar_one())
                for p in batch:
                    p.write(session)
        except SQLAlchemyError:
            if xid is not None:  # whether it committed is settled before it is applied again (_settle_in_doubt)
                self._in_doubt = _InDoubt(list(batch), xid, time.monotonic())
            raise
        self.written_total += len(batch)

    def _settle_in_doubt(self) -> bool:
        """The batch whose transaction failed: done if PostgreSQL committed it, left pending (applied again) if it
        did not or cannot tell; True to wait while its transaction is still in progress."""
        doubt = self._in_doubt
        assert doubt is not None
        with self._factory() as session:
            status = session.execute(text("SELECT txid_status(:xid)"), {"xid": doubt.xid}).scalar()
        if status == "in progress" and time.monotonic() - doubt.since < IN_DOUBT_WAIT_S:
            return True
        self._in_doubt = None
        if status == "committed":
            log.info(
                "store: %d write(s) whose COMMIT got no answer were committed; not applied again", len(doubt.batch)
            )
            self.written_total += len(doubt.batch)
            self._done(doubt.batch)
        return False

    def _apply_one_by_one(self, batch: list[_Pending]) -> None:
        """Isolate the bad write: each write alone, the good ones kept as they go, the bad one dropped and counted.
        A connectivity error on the way re-raises and keeps what is left for the next flush."""
        for p in batch:
            try:
                self._apply([p])
            except Exception as e:
                if isinstance(e, SQLAlchemyError) and is_connectivity_error(e, self._factory):
                    raise
                self.failed_total += 1
                log.error("store write %s failed and was dropped: %s", p.label, _cause(e))
            self._done([p])

    def _mark_down(self, e: BaseException) -> None:
        self.last_error = _cause(e)
        if self.up:
            waited = any(m in self.last_error.lower() for m in ("statement timeout", "lock timeout"))
            holders = lock_holders(self._factory) if waited else ""
            log.error("store unreachable, buffering writes: %s%s", self.last_error, holders)
        self.up = False

    def _mark_up(self) -> None:
        if not self.up:
            log.info("store reachable again")
        self.up = True
        self.last_error = None


def _cause(e: BaseException) -> str:
    """The driver's words and the error's type: "database is locked (OperationalError)"."""
    words, name = driver_words(e), type(getattr(e, "orig", None) or e).__name__
    return name if words == name else f"{words} ({name})"
