"""A write that waits out its statement timeout behind another session's lock names that session, on a real
PostgreSQL: an operator's psql left inside BEGIN after a LOCK TABLE (or a SELECT ... FOR UPDATE) holds every write to
that table. kvpilot buffered them and said only "store unreachable, buffering writes: canceling statement due to
statement timeout (QueryCanceled)" while PostgreSQL answered (measured with the reliability harness: the loop ticked
on, 80 writes buffered in 20 s, none lost, written 3 s after the lock went), with nothing to say whose session to
end. Now the line names it, as a migration waiting for its lock does (e2af3ae)."""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy.engine import make_url

import migrations
from scaler.decision import Decision
from store import repo
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory
from tests.services.postgres import PostgresServer, fresh_database


@pytest.mark.integration
def test_a_write_held_by_another_sessions_lock_names_that_session(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = fresh_database(postgres)
    migrations.upgrade(url)
    engine = make_engine(url, statement_timeout_s=0.5)
    writer = BufferedWriter(session_factory(engine), max_pending=100)
    decision = Decision("llm/chat", 1.0, 1, 1, 1, 0, "steady", "", None, None, {})
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with psycopg.connect(libpq, application_name="psql") as operator:
            operator.execute("LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE")  # and left inside the transaction
            pid = operator.info.backend_pid
            writer.submit("decision", lambda s: repo.record_decision(session=s, decision=decision))
            with caplog.at_level(logging.ERROR, logger="store.buffer"):
                assert not writer.flush()
            operator.rollback()
        assert writer.flush()
    finally:
        engine.dispose()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "store.buffer"]
    assert said.startswith("store unreachable, buffering writes: canceling statement due to statement timeout")
    # before: the line ended there
    assert f"a session holds locks on the store's tables: PostgreSQL backend {pid} (user " in said
    assert "'psql'" in said
    assert "idle in transaction" in said
    assert "decisions" in said
    assert said.endswith(f"(pg_terminate_backend({pid}) ends it)")
    assert (writer.written_total, writer.failed_total, writer.lost_total) == (1, 0, 0)
