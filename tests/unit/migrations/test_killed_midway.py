"""A schema upgrade killed half-way (SIGKILL, an OOM kill, or SIGTERM before `kvpilot run` handles signals) leaves
the store as it was: the next upgrade applies the migration whole. On SQLite each CREATE TABLE was committed on its
own, so a kill between two left tables without their alembic_version row, and every later upgrade (every later
`kvpilot run`) failed with "table ... already exists"."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import migrations

# Dies (as SIGKILL would: no cleanup, no rollback) right after the given statement of the upgrade has run.
_KILLED_AFTER = """
import os, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
import migrations

def after(conn, cursor, statement, *args):
    if statement.lstrip().upper().startswith(sys.argv[2]):
        os._exit(137)

event.listen(Engine, "after_cursor_execute", after)
migrations.upgrade(sys.argv[1], sys.argv[3])
sys.exit(3)  # the statement never ran
"""


def _tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.mark.parametrize(
    ("after", "to", "start"),
    [
        ("CREATE TABLE DECISIONS", "head", None),  # 0001, its second table
        ("CREATE TABLE STATIC_TARGETS", "head", "0001"),  # 0002 on a store at 0001
        ("CREATE TABLE DRAIN_RAIL", "head", "0002"),  # 0003
    ],
)
def test_an_upgrade_killed_half_way_is_applied_whole_the_next_time(
    tmp_path: Path, after: str, to: str, start: str | None
) -> None:
    db = tmp_path / "k.db"
    url = f"sqlite:///{db}"
    if start is not None:
        migrations.upgrade(url, start)
    before = _tables(db) if db.exists() else set()
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER, url, after, to], capture_output=True, timeout=60)
    assert killed.returncode == 137, killed.stderr
    assert migrations.current(url) == start
    assert _tables(db) == before  # nothing of the killed migration stayed
    migrations.upgrade(url)  # was: OperationalError "table decisions already exists", at every later try
    assert migrations.is_at_head(url)
