"""A running kvpilot that finds its store without a schema creates it again (``kvpilot.runtime.wiring.schema_again``,
with store.auto_migrate), looking under the migration lock: where another kvpilot created it while this one waited
for the lock, this one says nothing was created. Before, both said "created it again at 0004" (each upgrade ran, the
second a no-op, and each then read the revision back)."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest
from alembic import command

import migrations
from kvpilot.runtime.wiring import schema_again
from store.db import make_engine
from tests.helpers.poll import wait_for


def test_an_empty_store_gets_its_schema_and_says_its_revision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    again = schema_again(url, after_s=0.0)
    assert again.missing()
    assert again.create() == migrations.head()
    assert migrations.is_at_head(url)
    assert not again.missing()
    assert again.create() is None  # a schema there: nothing created


def test_a_schema_another_kvpilot_made_while_this_one_waited_is_not_said_created(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="migrations")
    db = tmp_path / "k.db"
    url = f"sqlite:///{db}"
    fd = os.open(f"{db}-migrate-lock", os.O_RDWR | os.O_CREAT, 0o644)
    said: list[str | None] = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another kvpilot, which found the store empty too, holds the lock
        waiting = threading.Thread(target=lambda: said.append(schema_again(url, after_s=0.0).create()), daemon=True)
        waiting.start()
        wait_for(lambda: "waiting for the migration lock" in caplog.text, timeout_s=30, what="this one waiting")
        cfg = migrations.alembic_config(url)  # the other creates the schema under its lock
        engine = make_engine(url, statement_timeout_s=None)
        try:
            with engine.connect() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
        finally:
            engine.dispose()
    finally:
        os.close(fd)  # the other is done
    waiting.join(60)
    assert not waiting.is_alive()
    assert said == [None]  # was ["0004"]: "created it again" said by a kvpilot that created nothing
    assert migrations.is_at_head(url)
