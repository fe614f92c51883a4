"""Migration 0003 on a database the drain race already damaged: duplicate live actions for one node are cancelled
(oldest kept, audited) so the unique index can exist; and the revision steps down and up again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

import migrations
from store.db import make_engine
from tests.reliability.conftest import Recorder, Store


def test_0003_resolves_duplicate_live_drains_and_steps_down_and_up(store: Store, record: Recorder) -> None:
    migrations.downgrade(store.url, "0002")
    engine = make_engine(store.url)
    with engine.begin() as conn:
        for state in ("requested", "approved", "executing", "done"):
            conn.execute(
                text(
                    "INSERT INTO drain_actions (node, state, dry_run, requested_by, requested_at, updated_at, reason, "
                    f"evidence) VALUES ('n0', '{state}', false, 'x', 1.0, 1.0, '', '{{}}')"
                )
            )
    migrations.upgrade(store.url)
    with engine.connect() as conn:
        states = [s for (s,) in conn.execute(text("SELECT state FROM drain_actions ORDER BY id"))]
        audited = conn.execute(text("SELECT count(*) FROM drain_events WHERE actor = 'migration 0003'")).scalar_one()
    migrations.downgrade(store.url, "0002")
    migrations.upgrade(store.url)
    engine.dispose()
    record("0003 over 3 live drains of one node", "oldest kept, 2 cancelled and audited; down and up again",
           f"{states}, {audited} audited, at head: {migrations.is_at_head(store.url)}",
           states == ["requested", "cancelled", "cancelled", "done"] and audited == 2
           and migrations.is_at_head(store.url))  # fmt: skip


_UPGRADE = """
import os, sys, time
import migrations
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.002)
migrations.upgrade(sys.argv[1])
"""


def test_four_kvpilots_starting_together_on_an_empty_store_all_start(
    store: Store, record: Recorder, tmp_path: Path
) -> None:
    # Each `kvpilot run` upgrades the schema at start. On SQLite (DDL not transactional) two at once raced: "table
    # capacity_profiles already exists", exit 1, in 4 of 5 trials of three processes.
    migrations.downgrade(store.url, "base")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _UPGRADE, store.url, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=Path(migrations.__file__).parents[1],
        )
        for _ in range(4)
    ]  # fmt: skip
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline() == "ready\n"
    go.touch()  # all four migrate at once
    errors = [
        next((line for line in reversed(err.splitlines()) if "Error" in line), err.splitlines()[-1])
        for p in procs
        if (err := p.communicate(timeout=60)[1].strip()) and p.returncode
    ]
    record("4 processes upgrade one empty store at once", "all 4 succeed, schema at head",
           f"{4 - len(errors)} succeeded {errors[:1]}, at head: {migrations.is_at_head(store.url)}",
           not errors and migrations.is_at_head(store.url))  # fmt: skip
