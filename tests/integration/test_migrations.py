"""Alembic is the only schema path: empty → head → base works on SQLite and on a real PostgreSQL, and the head
schema matches the SQLAlchemy models (no drift a future autogenerate would find)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

import migrations
from store.db import make_engine
from store.models import Base
from tests.services.postgres import PostgresServer, fresh_database, run_postgres

TABLES = {
    "deployments",
    "decisions",
    "findings",
    "drain_actions",
    "drain_events",
    "capacity_profiles",
    "rollups",
    "static_targets",
    "drain_rail",
    "audit_events",
    "instance_nodes",
}


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with run_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def empty_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'm.db'}"
    return fresh_database(request.getfixturevalue("postgres"))


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_to_head_and_back_to_base(empty_url: str) -> None:
    assert migrations.current(empty_url) is None
    migrations.upgrade(empty_url)
    assert migrations.current(empty_url) == migrations.head()
    assert _tables(empty_url) == TABLES
    migrations.downgrade(empty_url, "base")
    assert migrations.current(empty_url) is None
    assert _tables(empty_url) == set()
    migrations.upgrade(empty_url)  # and up again: downgrade left nothing behind that blocks it
    assert migrations.is_at_head(empty_url)


def test_head_matches_the_models(empty_url: str) -> None:
    migrations.upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations disagree; write a revision: {diff}"


def test_each_revision_steps_down_and_up_keeping_data(empty_url: str) -> None:
    # Walk every revision one step at a time; rows written at the first revision survive the walk.
    from alembic.script import ScriptDirectory
    from sqlalchemy import text

    revisions = [r.revision for r in ScriptDirectory.from_config(migrations.alembic_config()).walk_revisions()]
    migrations.upgrade(empty_url, revisions[-1])  # the oldest
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments VALUES ('a/x', 'a', 'x', 'vllm', NULL, 1.0, 2.0)"))
    for rev in reversed(revisions[:-1]):
        migrations.upgrade(empty_url, rev)
        assert migrations.current(empty_url) == rev
    for _ in revisions[:-1]:
        migrations.downgrade(empty_url, "-1")
    assert migrations.current(empty_url) == revisions[-1]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name FROM deployments")).scalar_one() == "x"
    engine.dispose()


@pytest.mark.integration
def test_replicas_starting_together_migrate_one_at_a_time(postgres: PostgresServer) -> None:
    # HA: several kvpilot replicas upgrade the same empty PostgreSQL at once; the advisory lock serialises them.
    from concurrent.futures import ThreadPoolExecutor

    url = fresh_database(postgres)
    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(migrations.upgrade, url) for _ in range(4)]:
            future.result()  # none failed on a table another one created
    assert migrations.is_at_head(url)
    assert _tables(url) == TABLES
