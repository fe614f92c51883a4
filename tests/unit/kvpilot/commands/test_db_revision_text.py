"""`kvpilot db current` prints the schema revision the database holds; one a hand or another program wrote may hold
terminal control characters (hostile input round 7, session 22, on 3bec2df's 'unknown to this kvpilot'): they were
printed raw, so a stored `\\x1b]0;...\\x07` retitled the operator's terminal and `\\x1b[2J` cleared it. Now a revision
that is not printable text is shown quoted, escaped, as `kvpilot db upgrade`'s refusal already named it."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from kvpilot.cli import app

STORED = "x\x1b]0;pwned\x07\x1b[2J"


def test_a_revision_with_control_characters_is_shown_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    monkeypatch.setenv("KVPILOT_DATABASE_URL", url)
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": STORED})
    engine.dispose()
    out = CliRunner().invoke(app, ["db", "current"])
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output
    assert "\x07" not in out.output
    assert r"is at 'x\x1b]0;pwned\x07\x1b[2J' (unknown to this kvpilot" in out.stdout
