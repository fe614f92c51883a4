"""The write buffer between the control loop and the database.

The loop must keep deciding when the store is away: it submits each write here and carries on. ``flush`` applies
what is pending in order, in bounded transactions. A connectivity error keeps everything for the next flush; the
buffer is bounded, and when full the oldest write goes (counted in ``dropped_total``) because the newest state is
what a restart needs. A write that fails for any other reason (a bug, a constraint) is dropped alone and counted in
``failed_total``, so one bad row cannot wedge the store forever.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

Write = Callable[[Session], None]


@dataclass(frozen=True, slots=True)
class _Pending:
    label: str
    write: Write


def _database_answers(factory: sessionmaker[Session]) -> bool:
    try:
        with factory() as session:
            session.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False


def is_connectivity_error(e: BaseException, factory: sessionmaker[Session]) -> bool:
    """True for "the database is not there" as opposed to "this statement is wrong".

    Drivers disagree on error classes (SQLite raises OperationalError for a missing table too), so the
    database is asked directly: if it answers a trivial query, the write itself was at fault.
    """
    if isinstance(e, DBAPIError) and e.connection_invalidated:
        return True
    return not _database_answers(factory)


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

    @property
    def pending(self) -> int:
        return len(self._pending)

    def submit(self, label: str, write: Write) -> None:
        with self._lock:
            if len(self._pending) >= self._max:
                dropped = self._pending.popleft()
                self.dropped_total += 1
                log.warning("store buffer full (%d writes): dropped the oldest, %s", self._max, dropped.label)
            self._pending.append(_Pending(label, write))

    def flush(self) -> bool:
        """Apply pending writes in order; return True when nothing is left pending."""
        with self._flush_lock:
            while True:
                with self._lock:
                    batch = [self._pending[i] for i in range(min(self._chunk, len(self._pending)))]
                if not batch:
                    return True
                try:
                    try:
                        self._apply(batch)
                    except SQLAlchemyError as e:
                        if is_connectivity_error(e, self._factory):
                            raise
                        self._apply_one_by_one(batch)
                except SQLAlchemyError as e:
                    self._mark_down(e)
                    return False
                self._mark_up()
                done = {id(p) for p in batch}
                with self._lock:
                    # A full buffer may have dropped part of this batch meanwhile; pop only what is still ours.
                    while self._pending and id(self._pending[0]) in done:
                        self._pending.popleft()
                self.written_total += len(batch)

    def _apply(self, batch: list[_Pending]) -> None:
        with self._factory() as session, session.begin():
            for p in batch:
                p.write(session)

    def _apply_one_by_one(self, batch: list[_Pending]) -> None:
        """Isolate the bad write; a connectivity error on the way re-raises and keeps the whole batch."""
        for p in batch:
            try:
                self._apply([p])
            except SQLAlchemyError as e:
                if is_connectivity_error(e, self._factory):
                    raise
                self.failed_total += 1
                log.error("store write %s failed and was dropped: %s", p.label, e)

    def _mark_down(self, e: BaseException) -> None:
        if self.up:
            log.error("store unreachable, buffering writes: %s", e)
        self.up = False
        self.last_error = str(e).splitlines()[0] if str(e) else type(e).__name__

    def _mark_up(self) -> None:
        if not self.up:
            log.info("store reachable again")
        self.up = True
        self.last_error = None
