"""`kvpilot demo` keeps its store in its temporary directory, whatever KVPILOT_DATABASE_URL names: the simulated
fleet's decisions and findings never land in a real kvpilot's database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app


def test_the_demo_never_writes_the_database_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "production.db"
    sqlite3.connect(real).close()  # an existing database, as `kvpilot db upgrade` leaves it
    monkeypatch.setenv("KVPILOT_DATABASE_URL", f"sqlite:///{real}")
    out = CliRunner().invoke(app, ["demo", "--json", "--port", "0", "--duration", "60"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["decisions"], "the demo decided"
    with sqlite3.connect(real) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [], "the demo migrated and wrote the database named by KVPILOT_DATABASE_URL"
