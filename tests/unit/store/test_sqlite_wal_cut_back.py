"""A SQLite store's WAL file is cut back once a reader that held it large is gone.

A read transaction held on the file (an operator's sqlite3 shell left open, a backup reading it) stops every
checkpoint from emptying the WAL: each commit meanwhile appends its pages, and kvpilot commits every tick. That much
is SQLite's design. But once the reader was gone, the WAL kept its largest size for good, the disk space never
returned (journal_size_limit -1: measured 13.2 MB after 3,000 commits, unchanged after 3,000 more without the
reader). Now a checkpoint that empties it cuts it back to ``WAL_SIZE_LIMIT_BYTES``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import migrations
from store import repo
from store.db import WAL_SIZE_LIMIT_BYTES, make_engine, session_factory, transaction

NODES = [f"node-{i:05d}" for i in range(800)]  # a row of some 12 KB: a few pages a commit


def test_the_wal_is_cut_back_once_a_reader_that_held_it_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "kvpilot.db"
    url = f"sqlite:///{path}"
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    wal = Path(f"{path}-wal")

    def commits(n: int) -> None:
        for i in range(n):
            with transaction(sessions) as s:
                repo.refresh_instance_nodes(session=s, instance="kvpilot-a", nodes=NODES[i % 2 :], now=float(i))

    try:
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM instance_nodes").fetchall()  # its snapshot held from here
        while wal.stat().st_size <= 2 * WAL_SIZE_LIMIT_BYTES:
            commits(50)
        held = wal.stat().st_size
        reader.execute("COMMIT")
        reader.close()
        commits(1500)  # past SQLite's 1,000-page automatic checkpoint, which now empties the WAL
        # before: the WAL stayed at its largest (held) for good
        assert wal.stat().st_size <= WAL_SIZE_LIMIT_BYTES < held
    finally:
        engine.dispose()
