"""Every number a setting holds is finite: ``.inf`` (YAML), ``inf`` or ``nan`` (a KVPILOT_* variable) is refused at
start, in words that name the setting, exit 2. Before (session 23), 17 settings took infinity, and what they meant
then was found only later: ``ha.lease_duration_s: .inf`` passed every check (``renew_every_s`` is below it) and
every Lease write then failed (``leaseDurationSeconds`` is a whole number: OverflowError), each round logged as
"cannot renew", and no instance ever led (no drain, no direct scaling), the failure ``check_lease`` exists to
refuse at start. A lease longer than the Lease's 32-bit ``leaseDurationSeconds`` holds is refused alike."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.settings import Settings, SettingsError, load_settings


def _float_settings(model: type[BaseModel], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        kinds = (field.annotation, *typing.get_args(field.annotation))
        section = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if section is not None:
            yield from _float_settings(section, (*path, name))
        elif float in kinds:
            yield (*path, name)


FLOATS = sorted(_float_settings(Settings))


def test_the_float_settings_are_found() -> None:
    assert ("ha", "lease_duration_s") in FLOATS
    assert len(FLOATS) >= 30  # every section's numbers, not the few the walk happened to reach


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999"])
@pytest.mark.parametrize("path", FLOATS, ids=".".join)
def test_a_setting_is_never_infinite(monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...], value: str) -> None:
    # the path's parts as written (the variable's name is read in lower case): the walk takes a dict of sections
    # (cost.gpus) for a section, so its field's name stands in the key's place, which a capital would refuse
    monkeypatch.setenv("KVPILOT_" + "__".join(path), value)
    with pytest.raises(SettingsError) as refused:
        load_settings(None)
    assert ".".join(path) in str(refused.value)


def test_an_infinite_lease_is_refused_at_start_in_words(tmp_path: Path) -> None:
    config = tmp_path / "k.yaml"
    config.write_text("ha:\n  enabled: true\n  lease_duration_s: .inf\n")
    done = CliRunner().invoke(app, ["config", "show", "--config", str(config)])
    assert done.exit_code == 2, done.output
    assert "ha.lease_duration_s" in done.output
    assert "finite" in done.output
    assert "Traceback" not in done.output


@pytest.mark.parametrize("seconds", [2.0**31, 1e12])
def test_a_lease_longer_than_a_lease_holds_is_refused(tmp_path: Path, seconds: float) -> None:
    config = tmp_path / "k.yaml"
    config.write_text(f"ha:\n  enabled: true\n  lease_duration_s: {seconds!r}\n")
    with pytest.raises(SettingsError) as refused:
        load_settings(config)
    assert "ha.lease_duration_s" in str(refused.value)
    assert "2147483647" in str(refused.value)
