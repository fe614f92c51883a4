"""A transaction on the store is one transaction from its first statement, on SQLite as on PostgreSQL.

pysqlite (legacy transaction control) begins a transaction only before an INSERT, UPDATE or DELETE, so a savepoint
opened as a transaction's first statement (``session.begin_nested()``) was SQLite's "SAVEPOINT outside BEGIN": it
began the transaction itself and its RELEASE committed it, and a rollback of the enclosing transaction left its rows
stored. store.db.make_engine now begins every SQLite transaction itself (BEGIN IMMEDIATE); these tests hold it to
that, and to not answering "database is locked" when writers race on one file."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from scaler.decision import Decision
from store import repo
from store.db import make_engine, ping, session_factory, transaction
from store.models import DecisionRow
from tests.reliability.conftest import Store


def _decision(t: float, key: str = "ns/chat") -> Decision:
    return Decision(key, t, 1, 1, 1, 0, "steady", "", None, None, {})


def _count(sessions: sessionmaker[Session]) -> int:
    with transaction(sessions) as s:
        return s.scalar(select(func.count()).select_from(DecisionRow)) or 0


@pytest.fixture
def sessions(store: Store) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(store.url)
    yield session_factory(engine)
    engine.dispose()


def _fails_after(sessions: sessionmaker[Session], work: Callable[[Session], None]) -> None:
    """``work`` in one transaction, then a later step of the same unit of work fails: the whole rolls back."""
    with transaction(sessions) as s:
        work(s)
        raise RuntimeError("a later step of the same unit of work fails")


def _savepoint_first(s: Session) -> None:
    with s.begin_nested():  # the transaction's first statement: no read, no write before it
        repo.record_decision(session=s, decision=_decision(1.0))
    repo.record_decision(session=s, decision=_decision(2.0))


def _read_then_savepoint(s: Session) -> None:
    assert s.scalar(select(func.count()).select_from(DecisionRow)) == 0
    with s.begin_nested():
        repo.record_decision(session=s, decision=_decision(1.0))


def _write(s: Session) -> None:
    repo.record_decision(session=s, decision=_decision(1.0))


def test_a_savepoint_as_the_first_statement_is_rolled_back_with_its_transaction(
    sessions: sessionmaker[Session],
) -> None:
    with pytest.raises(RuntimeError):
        _fails_after(sessions, _savepoint_first)
    assert _count(sessions) == 0  # was 1 on SQLite: the savepoint's row, committed at its release


def test_a_savepoint_after_a_read_is_rolled_back_with_its_transaction(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError):
        _fails_after(sessions, _read_then_savepoint)
    assert _count(sessions) == 0  # was 1 on SQLite: a read begins no transaction there


def test_a_transaction_that_fails_after_its_write_stores_nothing(sessions: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError):
        _fails_after(sessions, _write)
    assert _count(sessions) == 0


def test_a_savepoint_rolled_back_keeps_the_rest_of_its_transaction(sessions: sessionmaker[Session]) -> None:
    def part(s: Session) -> None:
        with s.begin_nested():
            _write(s)
            raise RuntimeError("this part only")

    with transaction(sessions) as s:
        with pytest.raises(RuntimeError):
            part(s)
        repo.record_decision(session=s, decision=_decision(2.0))
    assert _count(sessions) == 1


def test_writers_that_read_first_on_one_store_all_commit(store: Store) -> None:
    """Two engines (two kvpilots) and four threads each: every transaction reads, then writes what it read. On SQLite
    a deferred BEGIN fails such a transaction with "database is locked" at once whenever another committed between
    its read and its write; each begins with the write lock instead, waiting for it, so every one commits, and the
    reads and writes of each are one step (no count is read twice)."""
    engines = [make_engine(store.url) for _ in range(2)]
    factories = [session_factory(e) for e in engines]
    start = threading.Barrier(8)
    rounds = 15

    def writer(i: int) -> list[int]:
        seen: list[int] = []
        start.wait()
        for r in range(rounds):
            with transaction(factories[i % 2]) as s:
                n = s.scalar(select(func.count()).select_from(DecisionRow)) or 0
                repo.record_decision(session=s, decision=_decision(float(n), key=f"ns/w{i}-{r}"))
                seen.append(n)
        return seen

    try:
        with ThreadPoolExecutor(8) as pool:
            seen = [n for ns in pool.map(writer, range(8)) for n in ns]
        assert _count(factories[0]) == 8 * rounds
    finally:
        for e in engines:
            e.dispose()
    if store.backend == "sqlite":  # serializable: each transaction saw the ones before it (PostgreSQL reads committed)
        assert sorted(seen) == list(range(8 * rounds))


def test_the_store_probe_does_not_wait_for_a_writer(store: Store) -> None:
    """ping (the store probe behind /readyz and kvpilot_store_up) answers while another connection holds a write
    transaction: with every SQLite transaction begun IMMEDIATE it waited the busy timeout (5 s) and said False."""
    writer, prober = make_engine(store.url), make_engine(store.url)
    try:
        with transaction(session_factory(writer)) as s:
            repo.record_decision(session=s, decision=_decision(1.0))
            s.flush()  # the write lock held (SQLite) / a row locked (PostgreSQL) until the commit
            start = time.monotonic()
            assert ping(prober)
            assert time.monotonic() - start < 2.0
    finally:
        writer.dispose()
        prober.dispose()


def _write_in(sessions: sessionmaker[Session], *, reads_only: bool) -> None:
    with transaction(sessions, reads_only=reads_only) as s:
        repo.record_decision(session=s, decision=_decision(1.0))
        s.flush()


def test_a_unit_that_reads_only_fails_when_it_writes_and_the_next_unit_writes(store: Store) -> None:
    """A unit of work begun reads_only (the API's GETs) that writes by mistake fails at once, every time (SQLite:
    PRAGMA query_only), not only when another connection committed first; the same pooled connection writes again
    in the next ordinary unit. PostgreSQL: reads_only changes nothing (its readers never wait for writers)."""
    engine = make_engine(store.url)
    sessions = session_factory(engine)
    try:
        if store.backend == "sqlite":
            with pytest.raises(OperationalError, match="readonly"):
                _write_in(sessions, reads_only=True)
        with transaction(sessions, reads_only=True) as s:
            assert s.scalar(select(func.count()).select_from(DecisionRow)) == 0
        with transaction(sessions) as s:
            repo.record_decision(session=s, decision=_decision(2.0))
        assert _count(sessions) == 1
    finally:
        engine.dispose()


def test_a_unit_that_reads_only_does_not_wait_for_a_writer(store: Store) -> None:
    """reads_only: on SQLite a deferred BEGIN, so it reads the last committed state while another connection holds
    the write lock (begun IMMEDIATE it waited the busy timeout, 5 s, and failed)."""
    writer, reader = make_engine(store.url), make_engine(store.url)
    try:
        with transaction(session_factory(writer)) as s:
            repo.record_decision(session=s, decision=_decision(1.0))
            s.flush()
            start = time.monotonic()
            with transaction(session_factory(reader), reads_only=True) as r:
                assert r.scalar(select(func.count()).select_from(DecisionRow)) == 0
            assert time.monotonic() - start < 2.0
    finally:
        writer.dispose()
        reader.dispose()
