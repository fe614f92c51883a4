"""A ``KVPILOT_<SECTION>__…`` variable whose section is no setting stops kvpilot at start, as a misspelt key in the
file does: pydantic-settings ignored it, so ``KVPILOT_COLECTOR__INTERVAL_S=5`` ran with the default interval, rc 0."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.settings import SettingsError, load_settings


def test_a_misspelt_section_is_refused_naming_the_variable_and_the_section_meant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KVPILOT_COLECTOR__INTERVAL_S", "5")
    # left alone, as every variable without "__": KEDA's bearerTokenFromEnv variable, Kubernetes' service links for a
    # Service named kvpilot
    monkeypatch.setenv("KVPILOT_KEDA_TOKEN", "x" * 32)
    monkeypatch.setenv("KVPILOT_PORT_8080_TCP", "tcp://10.0.0.1:8080")
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert str(e.value) == (
        "invalid configuration (KVPILOT_* environment):\n"
        "  KVPILOT_COLECTOR__INTERVAL_S: no setting is named 'colector': did you mean KVPILOT_COLLECTOR__…?"
    )
    monkeypatch.delenv("KVPILOT_COLECTOR__INTERVAL_S")
    monkeypatch.setenv("KVPILOT_COLLECTOR__INTERVAL_S", "7")
    assert load_settings().collector.interval_s == 7.0


def test_config_show_and_run_exit_2_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_FOO__BAR", "1")
    for args in (["config", "show"], ["run"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "KVPILOT_FOO__BAR: no setting is named 'foo' (the settings: api, collector, " in result.stderr
        assert "Traceback" not in result.output
