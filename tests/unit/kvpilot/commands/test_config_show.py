"""`kvpilot config show` masks every secret it prints: the tokens, and the password of a database or PromQL URL (a
database URL with a password is a secret: docs/quickstart.md puts it in the Secret, never in the ConfigMap)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

TOKEN = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"


@pytest.mark.parametrize(
    ("database_url", "shown"),
    [
        # a password is masked, the user and the host kept (what `kvpilot db current` shows, to tell databases apart)
        ("postgresql+psycopg://kvp:pw-9d1c@db.example:5432/kvpilot", "postgresql+psycopg://kvp:***@db.example:5432/kvpilot"),
        # read as SQLAlchemy reads it: an unescaped / or @ belongs to the password, which runs to the last @
        ("postgresql://kvp:p/w@9d1c@db.example/kvpilot", "postgresql://kvp:***@db.example/kvpilot"),
        ("postgresql://kvp@db.example/kvpilot", "postgresql://kvp@db.example/kvpilot"),  # no password: as it is
        ("sqlite:////var/lib/kvpilot/kvpilot.db", "sqlite:////var/lib/kvpilot/kvpilot.db"),
    ],
)  # fmt: skip
def test_the_database_password_is_masked(
    monkeypatch: pytest.MonkeyPatch, tmp_path, database_url: str, shown: str
) -> None:
    monkeypatch.setenv("KVPILOT_DATABASE_URL", database_url)
    monkeypatch.setenv("KVPILOT_ADMIN_TOKENS", TOKEN)
    cfg = tmp_path / "kvpilot.yaml"
    cfg.write_text("collector:\n  discovery:\n    kind: promql\n    promql_url: http://reader:hunter2-7f@thanos:9090\n")
    for args in (["--json"], []):
        out = CliRunner().invoke(app, ["config", "show", "-c", str(cfg), *args])
        assert out.exit_code == 0, out.output
        for secret in ("pw-9d1c", "9d1c", "hunter2", TOKEN):
            assert secret not in out.stdout, f"{secret} printed by `kvpilot config show {' '.join(args)}`"
    data = json.loads(CliRunner().invoke(app, ["config", "show", "-c", str(cfg), "--json"]).stdout)
    assert data["store"]["database_url"] == shown
    assert data["collector"]["discovery"]["promql_url"] == "http://reader:***@thanos:9090"
    assert data["api"]["admin_tokens"] == ["**********"]
