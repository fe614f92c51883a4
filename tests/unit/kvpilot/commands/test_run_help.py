"""`kvpilot run --help` says what runs without a settings file and which port it serves on, in step with the settings'
own defaults (it said neither: a new user learnt them from the docs only)."""

from __future__ import annotations

from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.settings import load_settings


def test_run_help_names_the_zero_config_fleet_and_the_default_port() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    settings = load_settings(None)
    assert settings.collector.discovery.kind == "simulator"  # what "with neither" runs against
    assert "built-in simulator is the fleet" in result.stdout
    assert f"default: api.http_port, {settings.api.http_port}" in result.stdout
