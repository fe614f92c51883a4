"""The write buffer keeps the loop deciding while the store is away, bounded, in order, and catches up."""

from __future__ import annotations

import sqlite3

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

import migrations
from scaler.decision import Decision
from store import repo
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory
from store.models import DecisionRow


def _write(t: float):
    d = Decision("a/x", t, 1, 1, 2, 0, "reactive", "queue")
    return lambda s: repo.record_decision(session=s, decision=d)


def _timestamps(factory: sessionmaker[Session]) -> list[float]:
    with factory() as s:
        return [r.timestamp for r in s.scalars(select(DecisionRow).order_by(DecisionRow.id))]


def test_flush_applies_in_order(factory: sessionmaker[Session]) -> None:
    w = BufferedWriter(factory, max_pending=10, chunk=2)
    for t in range(5):
        w.submit(f"d{t}", _write(t))
    assert w.flush()
    assert w.pending == 0
    assert w.up
    assert _timestamps(factory) == [0, 1, 2, 3, 4]


def test_unreachable_store_buffers_bounded_then_catches_up(db_url: str, tmp_path) -> None:
    # A database file that is a folder cannot be opened: it stands in for a database that is away.
    (tmp_path / "away").mkdir()
    engine = make_engine(db_url)
    w = BufferedWriter(session_factory(make_engine(f"sqlite:///{tmp_path / 'away'}")), max_pending=3)
    for t in range(5):
        w.submit(f"d{t}", _write(t))
    assert not w.flush()
    assert (w.up, w.pending, w.dropped_total) == (False, 3, 2)  # oldest two dropped, counted
    assert w.last_error
    w._factory = session_factory(engine)  # the database is back
    assert w.flush()
    assert w.up
    assert w.last_error is None
    assert _timestamps(session_factory(engine)) == [2, 3, 4]


def test_a_bad_write_is_dropped_alone(factory: sessionmaker[Session]) -> None:
    w = BufferedWriter(factory, max_pending=10)
    w.submit("ok1", _write(1))
    w.submit("bad", lambda s: s.execute(text("INSERT INTO no_such_table VALUES (1)")))
    w.submit("ok2", _write(2))
    assert w.flush()
    assert (w.failed_total, w.up) == (1, True)
    assert _timestamps(factory) == [1, 2]


def test_a_store_that_refuses_every_write_keeps_them_instead_of_dropping(db_url: str) -> None:
    # Reads work, writes do not (a read-only or full database): that is the store's fault, not the rows'.
    from sqlalchemy import event

    readonly = make_engine(db_url)
    event.listen(readonly, "connect", lambda conn, _: conn.execute("PRAGMA query_only = ON"))
    w = BufferedWriter(session_factory(readonly), max_pending=10)
    for t in range(3):
        w.submit(f"d{t}", _write(t))
    assert not w.flush()
    assert (w.up, w.pending, w.failed_total, w.lost_total) == (False, 3, 0, 0)  # kept, none counted as bad rows
    w._factory = session_factory(make_engine(db_url))  # writable again
    assert w.flush()
    assert _timestamps(w._factory) == [0, 1, 2]


def test_a_bad_row_among_good_ones_is_dropped_alone_even_when_it_is_not_a_database_error(
    factory: sessionmaker[Session],
) -> None:
    def broken(_: Session) -> None:
        raise ValueError("a bug in one write")

    w = BufferedWriter(factory, max_pending=10)
    w.submit("ok1", _write(1))
    w.submit("broken", broken)
    w.submit("ok2", _write(2))
    assert w.flush()
    assert (w.failed_total, w.lost_total, w.pending) == (1, 1, 0)
    assert _timestamps(factory) == [1, 2]  # each good write applied exactly once


def test_a_locked_store_is_reported_in_the_drivers_words(tmp_path, caplog) -> None:
    # Was "(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush block ...)" as the
    # error, with the statement and its parameters after it in the log.
    url = f"sqlite:///{tmp_path / 'k.db'}"
    migrations.upgrade(url)
    holder = sqlite3.connect(tmp_path / "k.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        w = BufferedWriter(session_factory(make_engine(url, statement_timeout_s=0.1)), max_pending=3)
        w.submit("d0", _write(0))
        assert not w.flush()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (w.up, w.last_error) == (False, "database is locked (OperationalError)")
    assert "INSERT" not in caplog.text
