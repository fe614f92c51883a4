"""`kvpilot run` refuses a SQLite store in memory: one database per connection, so the schema upgrade and every store
thread opened an empty one of its own and each write failed with "no such table" while the process ran on (the real
command, in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KVPILOT = str(Path(sys.executable).with_name("kvpilot"))


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://", "sqlite:///:memory:?cache=shared"])
def test_a_sqlite_store_in_memory_is_refused_at_start(tmp_path: Path, url: str) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "KVPILOT_GRPC_PORT": "0", "KVPILOT_DATABASE_URL": url}
    # Before: it started and ran until stopped, logging "no such table: drain_actions" every tick.
    out = subprocess.run([KVPILOT, "run", "--port", "0"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: database URL {url!r} is a SQLite database in memory")
    assert "Traceback" not in out.stderr
