"""A migration waiting for PostgreSQL's migration lock says so, naming the session that holds it, as the SQLite lock
file's wait does. Before, `kvpilot run` (and `kvpilot db upgrade`) held at start by another kvpilot's migration, or by a
session left holding the advisory lock, waited without a word: its last line the embedded simulator's, never ready."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import psycopg
import pytest

import migrations
from tests.helpers.poll import wait_for
from tests.services.postgres import PostgresServer, fresh_database, run_postgres

pytestmark = pytest.mark.integration

KEY = 0x6B7670696C6F74  # migrations._LOCK_KEY: "kvpilot" in ASCII


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with run_postgres() as server:
        yield server


def test_a_migration_waiting_for_the_lock_says_who_holds_it(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = fresh_database(postgres)
    caplog.set_level(logging.INFO)
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True, application_name="stuck-migrator") as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (KEY,))
        done = threading.Event()
        failed: list[BaseException] = []

        def upgrade() -> None:
            try:
                migrations.upgrade(url)
            except BaseException as e:  # handed to the test
                failed.append(e)
            finally:
                done.set()

        threading.Thread(target=upgrade, daemon=True).start()

        def said() -> list[str]:
            return [r.getMessage() for r in list(caplog.records) if "waiting for the migration lock" in r.getMessage()]

        wait_for(said, timeout_s=15, what="the wait for the migration lock said")
        assert not done.is_set()  # it waits: the lock is held
        (line,) = said()
        assert f"PostgreSQL backend {holder.info.backend_pid}" in line
        assert "'stuck-migrator'" in line
        assert f"pg_terminate_backend({holder.info.backend_pid})" in line
        holder.execute("SELECT pg_advisory_unlock(%s)", (KEY,))
    wait_for(done.is_set, timeout_s=30, what="the migration done once the lock is free")
    assert not failed
    assert migrations.current(url) == migrations.head()


def test_a_free_lock_is_taken_without_a_word(postgres: PostgresServer, caplog: pytest.LogCaptureFixture) -> None:
    url = fresh_database(postgres)
    caplog.set_level(logging.INFO)
    migrations.upgrade(url)
    assert migrations.current(url) == migrations.head()
    assert not [r for r in caplog.records if "migration lock" in r.getMessage()]
