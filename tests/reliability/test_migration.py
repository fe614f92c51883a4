"""Migration 0003 on a database the drain race already damaged: duplicate live actions for one node are cancelled
(oldest kept, audited) so the unique index can exist; and the revision steps down and up again."""

from __future__ import annotations

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
