"""A URL setting of only white space, or with white space around it, is refused at validation, naming the setting
(session 20). Before, ``KVPILOT_DATABASE_URL="   "`` passed (`kvpilot config show` printed it) and failed only at
the store's first use ("not a URL SQLAlchemy understands"); ``sharding.advertise_address`` of blanks was
advertised to the other shards as this instance's KEDA address. Empty stays unset, as an empty environment
variable is (the default SQLite file; the advertised address from ``$POD_IP``). Through the command line, from the
environment and from the settings file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.settings import SettingsError, load_settings

BLANKS = ["   ", "\t", "\n", " \t\n "]
# (environment variable, the setting it names, other variables the setting needs to be read)
URL_SETTINGS = [
    ("KVPILOT_DATABASE_URL", "store.database_url", {}),
    ("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", "collector.discovery.promql_url",
     {"KVPILOT_COLLECTOR__DISCOVERY__KIND": "promql"}),
    ("KVPILOT_SHARDING__ADVERTISE_ADDRESS", "sharding.advertise_address", {}),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.mark.parametrize("blank", BLANKS, ids=repr)
@pytest.mark.parametrize(("variable", "setting", "needs"), URL_SETTINGS, ids=[s[1] for s in URL_SETTINGS])
def test_a_blank_url_in_the_environment_is_refused_naming_the_setting(
    variable: str, setting: str, needs: dict[str, str], blank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in {**needs, variable: blank}.items():
        monkeypatch.setenv(k, v)
    out = CliRunner().invoke(app, ["config", "show"])
    assert out.exit_code == 2, out.output
    assert f"{setting}: is blank" in out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize(("variable", "setting", "needs"), URL_SETTINGS, ids=[s[1] for s in URL_SETTINGS])
def test_white_space_around_a_url_is_refused(
    variable: str, setting: str, needs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    value = {"store": "postgresql+psycopg://u@db/kvpilot", "collector": "http://prometheus:9090"}.get(
        setting.split(".")[0], "10.0.0.7:9090"
    )
    for k, v in {**needs, variable: value + "\n"}.items():  # a Secret written with echo
        monkeypatch.setenv(k, v)
    out = CliRunner().invoke(app, ["config", "show"])
    assert out.exit_code == 2, out.output
    assert f"{setting}: has white space around it" in out.output


def test_a_blank_database_url_in_the_settings_file_is_refused_with_its_line(tmp_path: Path) -> None:
    config = tmp_path / "kvpilot.yaml"
    config.write_text('collector:\n  interval_s: 5\nstore:\n  database_url: "  "\n')
    out = CliRunner().invoke(app, ["config", "show", "--config", str(config)])
    assert out.exit_code == 2, out.output
    assert "store.database_url (kvpilot.yaml:4): is blank" in out.output


def test_the_store_command_refuses_it_before_touching_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_DATABASE_URL", "   ")
    out = CliRunner().invoke(app, ["db", "current"])
    assert out.exit_code == 2, out.output
    assert "store.database_url: is blank" in out.output  # was "not a URL SQLAlchemy understands", exit 1


def test_empty_is_unset_and_a_url_is_kept() -> None:
    settings = load_settings(store={"database_url": ""}, sharding={"advertise_address": ""})
    assert settings.store.database_url is None
    assert settings.database_url.startswith("sqlite:///")  # the default file
    assert settings.sharding.advertise_address is None
    url = "postgresql+psycopg://u@db/kvpilot"
    assert load_settings(store={"database_url": url}).database_url == url
    with pytest.raises(SettingsError, match=r"discovery.promql_url is not set"):
        load_settings(collector={"discovery": {"kind": "promql", "promql_url": ""}})
