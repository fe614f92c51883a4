"""`kvpilot db upgrade|downgrade|current` against a SQLite file named by KVPILOT_DATABASE_URL."""

from __future__ import annotations

import pytest
from alembic.script import ScriptDirectory
from typer.testing import CliRunner

import migrations
from kvpilot.cli import app


@pytest.fixture
def url(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'db' / 'kvpilot.db'}"
    monkeypatch.setenv("KVPILOT_DATABASE_URL", url)
    return url


def test_upgrade_current_downgrade(url: str) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["db", "upgrade", "base"])  # creates the file, at no revision
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["db", "current"])
    assert out.exit_code == 0
    assert "base (empty)" in out.stdout
    out = runner.invoke(app, ["db", "upgrade"])
    assert out.exit_code == 0, out.output
    assert f"is at {migrations.head()}" in out.stdout
    assert "(newest)" in runner.invoke(app, ["db", "current"]).stdout
    out = runner.invoke(app, ["db", "downgrade", "base"])
    assert out.exit_code == 0
    assert migrations.current(url) is None


def test_current_says_a_revision_it_does_not_know_is_not_behind(url: str) -> None:
    # after a rollback to an older kvpilot: the database is ahead, and `kvpilot db upgrade` cannot help
    import sqlalchemy as sa

    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    out = CliRunner().invoke(app, ["db", "current"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == (
        f"{url} is at 9999 (unknown to this kvpilot, whose newest is {migrations.head()}: a newer kvpilot wrote it)"
    )


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["db", "upgrade", "nope"], {}, 2, "failed"),  # an unknown revision is the user's: names the database, exit 2
        (["db", "current"], {"KVPILOT_DATABASE_URL": "postgresql://u:secret@127.0.0.1:1/x"}, 1, "u:***@"),  # no pw
        (["db", "current"], {"KVPILOT_COLLECTOR__INTERVAL_S": "0"}, 2, "collector.interval_s"),  # bad settings
    ],
)
def test_errors(url: str, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict, code: int, message: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = CliRunner().invoke(app, args)
    assert out.exit_code == code
    assert message in out.output
    assert "secret" not in out.output


def test_current_names_the_database_it_read(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the URL from the configuration file, shown so a forgotten -c or variable is seen at once
    db = tmp_path / "named.db"
    cfg = tmp_path / "kvpilot.yaml"
    cfg.write_text(f"store:\n  database_url: sqlite:///{db}\n")
    monkeypatch.delenv("KVPILOT_DATABASE_URL", raising=False)
    assert CliRunner().invoke(app, ["db", "upgrade", "base", "-c", str(cfg)]).exit_code == 0
    out = CliRunner().invoke(app, ["db", "current", "-c", str(cfg)])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == f"sqlite:///{db} is at base (empty) (newest is {migrations.head()})"
    # nothing configured: the default file under data_dir, and that it is the default
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    assert CliRunner().invoke(app, ["db", "upgrade", "base"]).exit_code == 0
    out = CliRunner().invoke(app, ["db", "current"])
    assert out.stdout.startswith(f"sqlite:///{tmp_path / 'data' / 'kvpilot.db'} (the default:")


@pytest.mark.parametrize("action", [["current"], ["downgrade"], ["downgrade", "base"]])
def test_reading_a_missing_sqlite_file_creates_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch, action) -> None:
    # a mistyped path is refused by name, and neither its folder nor an empty database is left behind
    db = tmp_path / "nodir" / "x.db"
    monkeypatch.setenv("KVPILOT_DATABASE_URL", f"sqlite:///{db}")
    out = CliRunner().invoke(app, ["db", *action])
    assert out.exit_code == 2, out.output
    (line,) = out.stderr.splitlines()
    assert line == f"error: no database at {db}: the SQLite file does not exist (`kvpilot db upgrade` creates it)"
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize("action", [["current"], ["upgrade"], ["downgrade"]])
def test_a_url_that_is_not_one_exits_2_in_one_line(monkeypatch: pytest.MonkeyPatch, action) -> None:
    # was a sqlalchemy ArgumentError traceback (the error path itself parsed the URL to hide its password)
    monkeypatch.setenv("KVPILOT_DATABASE_URL", "garbage")
    out = CliRunner().invoke(app, ["db", *action])
    assert out.exit_code == 2
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: database URL 'garbage' is not a URL SQLAlchemy understands")


def test_downgrade_minus_one_is_the_revision_its_help_names(url: str) -> None:
    # was "No such option: -1" (exit 2): only `kvpilot db downgrade -- -1` worked
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    out = CliRunner().invoke(app, ["db", "downgrade", "-1"])
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(app, ["db", "downgrade", "--force", "-1"])  # with an option before it, too
    assert out.exit_code == 0, out.output
    revisions = [s.revision for s in ScriptDirectory.from_config(migrations.alembic_config()).walk_revisions()]
    assert migrations.current(url) == revisions[2]  # two steps below head


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_an_empty_revision_is_refused_in_one_line(url: str, action: str) -> None:
    # was "failed: AssertionError" (Alembic's bare assert), exit 1
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    out = CliRunner().invoke(app, ["db", action, " "])
    assert out.exit_code == 2
    assert out.stderr.strip() == "error: the revision is empty: give head, base, an id (`kvpilot db current`) or +N/-N"
    assert migrations.is_at_head(url)
