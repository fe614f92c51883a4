"""Migration 0003 on a database the drain race already damaged: duplicate live actions for one node are cancelled
(oldest kept, audited) so the unique index can exist; and the revision steps down and up again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

import migrations
from store.db import make_engine
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import running


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


def _downgrade(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    kvpilot = str(Path(sys.executable).with_name("kvpilot"))
    env = {**os.environ, "KVPILOT_DATABASE_URL": url}
    return subprocess.run([kvpilot, "db", "downgrade", *args], env=env, capture_output=True, text=True, timeout=60)


def test_db_downgrade_is_refused_while_an_instance_has_the_store_open(store: Store, record: Recorder) -> None:
    # Before: `kvpilot db downgrade` ran at once under a running instance, whose store changes then failed with 503
    # until the next upgrade. Now: refused (exit 2) unless --force; after the instance stops, it downgrades.
    head = migrations.head()
    with running(store.url) as r:
        wait_for(lambda: r.ticks() >= 2, timeout_s=20, what="two ticks")
        refused = _downgrade(store.url)
        at_after_refusal = migrations.current(store.url)
        forced = _downgrade(store.url, "--force")
        at_after_force = migrations.current(store.url)
        migrations.upgrade(store.url)
    stopped = _downgrade(store.url)
    record("db downgrade under a running instance", "refused (exit 2), schema unchanged; --force and after a stop: 0",
           f"exit {refused.returncode} at {at_after_refusal}; --force exit {forced.returncode}; "
           f"stopped exit {stopped.returncode}",
           refused.returncode == 2 and at_after_refusal == head and forced.returncode == 0
           and at_after_force != head and stopped.returncode == 0)  # fmt: skip
    assert "not downgrading" in refused.stderr
    assert "pass --force" in refused.stderr
    assert "Traceback" not in refused.stderr + forced.stderr + stopped.stderr
    assert forced.stderr.startswith("warning: downgrading")
    assert stopped.stderr == ""
    assert migrations.current(store.url) != head
