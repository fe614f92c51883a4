"""A control character in the settings file or the targets file is refused by line, in words, as any other bad YAML.

PyYAML refuses a control character (NUL, BEL, ESC, ...) when the loader is made, before any parse, and both readers
made it outside the block that turns YAML errors into words: `kvpilot config show` / `kvpilot run` ended in a
ReaderError traceback (exit 1), and a targets file that took one while kvpilot ran logged a 35-line traceback every
tick (its stamp never taken, so it was read again each time) where any other bad targets file is said once."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from collector.discovery.static import StaticFileDiscovery, TargetFileError, load_targets
from kvpilot.cli import app
from kvpilot.settings import SettingsError, load_settings

GOOD = "targets:\n  - url: http://10.0.0.1:8000/metrics\n"


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x7f", "\x9b", "\ufffe"])
def test_the_settings_file_says_which_line_holds_it(tmp_path: Path, char: str) -> None:
    path = tmp_path / "kvpilot.yaml"
    path.write_text(f"collector:\n  interval_s: 5{char}\n", encoding="utf-8")
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    assert str(e.value) == (
        f"config file {path}, line 2: character U+{ord(char):04X} is not allowed in YAML (no control characters, "
        "nor U+FFFE, U+FFFF)"
    )
    result = CliRunner().invoke(app, ["config", "show", "-c", str(path)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {e.value}"]


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"])
def test_a_line_break_only_yaml_sees_is_refused_by_line_in_both_files(tmp_path: Path, char: str) -> None:
    # PyYAML reads NEL, U+2028 and U+2029 as line breaks; an editor and grep show none: the text after one inside a
    # comment was read as settings (buffer_max_writes 5 below), and YAML's own error lines disagreed with the editor's
    path = tmp_path / "kvpilot.yaml"
    path.write_text(f"store:\n  retention_days: 3  # note{char}  buffer_max_writes: 5\n", encoding="utf-8")
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    assert str(e.value).startswith(f"config file {path}, line 2: character U+{ord(char):04X} is not allowed: YAML ")
    targets = tmp_path / "targets.yaml"
    targets.write_text(GOOD + f"  # a comment{char}- url: http://10.0.0.9:8000/metrics\n", encoding="utf-8")
    with pytest.raises(TargetFileError) as t:
        load_targets(targets)
    assert str(t.value).startswith(f"{targets}:3: character U+{ord(char):04X} is not allowed: YAML reads it")


def test_the_targets_file_says_which_line_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(GOOD + "  - url: http://10.0.0.2:8000/metrics\x00\n", encoding="utf-8")
    with pytest.raises(TargetFileError) as e:
        load_targets(path)
    assert str(e.value) == (
        f"{path}:3: character U+0000 is not allowed in YAML (no control characters, nor U+FFFE, U+FFFF)"
    )


def test_a_targets_file_that_takes_one_while_kvpilot_runs_keeps_the_targets_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(GOOD, encoding="utf-8")
    discovery = StaticFileDiscovery(path, settle_s=0.0)  # a change applied at once (the settle rule aside)
    path.write_text(GOOD + "  - url: http://10.0.0.2:8000/metrics\x07\n", encoding="utf-8")
    os.utime(path, ns=(1, 1))  # a stamp of its own, whatever the file system's clock resolution
    caplog.set_level(logging.INFO)
    kept = [discovery.current() for _ in range(3)]  # three ticks
    assert [[t.url for t in ts] for ts in kept] == [["http://10.0.0.1:8000/metrics"]] * 3
    assert discovery.last_error is not None
    assert "targets.yaml:3: character U+0007" in discovery.last_error
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1  # said once, not each tick
    assert errors[0].exc_info is None
    path.write_text(GOOD.replace("10.0.0.1", "10.0.0.3"), encoding="utf-8")  # fixed: read again
    assert [t.url for t in discovery.current()] == ["http://10.0.0.3:8000/metrics"]


# Any text, with the characters YAML refuses and its own syntax among them: each reader refuses in its own words
# (SettingsError, TargetFileError) or reads it; nothing else escapes.
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("\x00\x07\x08\x0b\x0c\x1b\x7f\x85\x9b\ufeff\ufffe\uffff\t\n\r :-[]{}&*!|>'\"#%@`,?")),
        st.characters(codec="utf-8"),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_any_text_is_read_or_refused_in_words(tmp_path: Path, text: str) -> None:
    path = tmp_path / "any.yaml"
    path.write_text(text, encoding="utf-8", newline="")
    with contextlib.suppress(SettingsError):
        load_settings(path)
    with contextlib.suppress(TargetFileError):
        load_targets(path)
