"""A configuration error names the line of the config file that holds the bad value (unknown engines above all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.settings import SettingsError, load_settings

CONFIG = """\
collector:
  interval_s: 0
  discovery:
    kind: static
    static_targets:
      - url: http://a:1/metrics
      - url: http://b:1/metrics
        engine: vlm
"""


def test_every_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "kvpilot.yaml"
    path.write_text(CONFIG)
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    lines = str(e.value).splitlines()
    assert "  collector.interval_s (kvpilot.yaml:2): Input should be greater than 0" in lines
    assert any(
        line.startswith("  collector.discovery.static_targets.1.engine (kvpilot.yaml:8): unknown engine 'vlm'; known:")
        for line in lines
    )


def test_a_value_from_the_environment_has_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kvpilot.yaml"
    path.write_text("collector:\n  interval_s: 5\n")
    monkeypatch.setenv("KVPILOT_COLLECTOR__TIMEOUT_S", "99")
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    assert "  collector.timeout_s: Input should be less than or equal to 60" in str(e.value).splitlines()


def test_engine_case_is_normalised_in_static_targets(tmp_path: Path) -> None:
    path = tmp_path / "kvpilot.yaml"
    path.write_text("collector:\n  discovery:\n    static_targets:\n      - {url: 'http://a:1/m', engine: vLLM}\n")
    assert load_settings(path).collector.discovery.static_targets[0].engine == "vllm"
