"""A database URL may carry its password as a libpq query parameter (`?password=...`, `sslpassword=` for the client
key), which psycopg takes as the password (hostile input round 7, session 22). Everything that shows the store's URL
masked only the `user:password@` form (SQLAlchemy's hide_password, kvpilot's password_masked), so the password was
printed by `kvpilot config show` and `kvpilot db current`, in `kvpilot run`'s start line (a log line each start) and in
its errors. Now every one of them shows `password=***`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from collector.urls import password_masked
from kvpilot.cli import app
from store.db import StoreConfigError, make_engine, url_shown

SECRET = "hunter2-q7"
URL = f"postgresql://kv@127.0.0.1:1/kv?sslmode=disable&password={SECRET}&sslpassword={SECRET}x"
SHOWN = "postgresql://kv@127.0.0.1:1/kv?sslmode=disable&password=***&sslpassword=***"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, SHOWN),
        (f"postgresql://kv:{SECRET}@db/kv?password={SECRET}", "postgresql://kv:***@db/kv?password=***"),
        (f"postgresql://kv@db/kv?application_name=x&password={SECRET}#f", "postgresql://kv@db/kv?application_name=x&password=***#f"),
        # any parameter named like a secret is masked (one rule with scrape targets' ?token=), the others kept
        ("postgresql://kv@db/kv?mypassword=2&sslmode=require", "postgresql://kv@db/kv?mypassword=***&sslmode=require"),
        ("postgresql://kv@db/kv?application_name=x&connect_timeout=5", "postgresql://kv@db/kv?application_name=x&connect_timeout=5"),
        ("sqlite:////var/lib/kvpilot/kvpilot.db", "sqlite:////var/lib/kvpilot/kvpilot.db"),
    ],
)  # fmt: skip
def test_a_query_password_is_masked_where_a_url_is_shown(url: str, shown: str) -> None:
    assert password_masked(url) == shown
    assert SECRET not in url_shown(url)


def test_kvpilot_config_show_and_db_current_mask_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVPILOT_DATABASE_URL", URL)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    out = CliRunner().invoke(app, ["config", "show", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["store"]["database_url"] == SHOWN
    for args in (["config", "show"], ["db", "current"], ["db", "upgrade"]):
        out = CliRunner().invoke(app, args)
        assert SECRET not in out.output, f"kvpilot {' '.join(args)}: {out.output}"
        assert "password=***" in out.output or args == ["config", "show"]


def test_kvpilot_run_and_the_store_errors_mask_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KVPILOT_DATABASE_URL", URL)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with caplog.at_level(logging.INFO):
        out = CliRunner().invoke(app, ["run", "--port", "0"])  # the store at 127.0.0.1:1 cannot be reached
    assert out.exit_code != 0
    assert SECRET not in out.output + caplog.text
    with pytest.raises(StoreConfigError) as caught:
        make_engine(URL.replace("postgresql:", "postgresql+nodriver:"))
    assert SECRET not in str(caught.value)
    assert "password=***" in str(caught.value)
