"""`runtime.event_loop`: the setting picks the loop `kvpilot run` runs on (kvpilot.runtime.event_loop): uvloop when it
is asked for or, with `auto`, when it can be imported; asyncio's when it is refused or missing; a clear error when
uvloop is asked for and not installed."""

from __future__ import annotations

import asyncio
import sys
import warnings

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.runtime import event_loop
from kvpilot.settings import SettingsError, load_settings


@pytest.fixture
def no_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvloop cannot be imported, as where it is not installed."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


async def _name() -> str:
    return event_loop.running_loop_name()


def test_the_default_is_asyncio_and_the_environment_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().runtime.event_loop == "asyncio"
    monkeypatch.setenv("KVPILOT_RUNTIME__EVENT_LOOP", "uvloop")
    assert load_settings().runtime.event_loop == "uvloop"
    monkeypatch.setenv("KVPILOT_RUNTIME__EVENT_LOOP", "tokio")
    with pytest.raises(SettingsError, match=r"runtime\.event_loop"):
        load_settings()


def test_asyncio_when_refused() -> None:
    assert event_loop.loop_factory("asyncio") is None
    assert event_loop.run(_name(), "asyncio") == "asyncio"


@pytest.mark.usefixtures("no_uvloop")
def test_auto_falls_back_to_asyncio_without_uvloop() -> None:
    assert event_loop.loop_factory("auto") is None
    assert event_loop.run(_name(), "auto") == "asyncio"


@pytest.mark.usefixtures("no_uvloop")
def test_uvloop_asked_for_but_not_installed_is_a_clear_error() -> None:
    with pytest.raises(SettingsError, match=r"runtime\.event_loop is uvloop, but uvloop cannot be imported") as e:
        event_loop.loop_factory("uvloop")
    assert "pip install uvloop" in str(e.value)
    main = _name()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine handed over is closed, never left un-awaited
        with pytest.raises(SettingsError):
            event_loop.run(main, "uvloop")
    assert main.cr_frame is None  # closed


@pytest.mark.usefixtures("no_uvloop")
def test_kvpilot_run_refuses_uvloop_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_RUNTIME__EVENT_LOOP", "uvloop")
    result = CliRunner().invoke(app, ["run", "--port", "0"])
    assert result.exit_code == 2
    assert "error: runtime.event_loop is uvloop, but uvloop cannot be imported" in result.output
    assert "pip install uvloop" in result.output


def test_uvloop_when_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    for choice in ("auto", "uvloop"):
        assert event_loop.loop_factory(choice) is uvloop.new_event_loop
        assert event_loop.run(_name(), choice) == "uvloop"
    assert event_loop.run(_name(), "asyncio") == "asyncio"  # refused even where installed


def test_the_loop_is_closed_and_the_default_policy_untouched() -> None:
    pytest.importorskip("uvloop")
    policy = asyncio.get_event_loop_policy()

    async def the_loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = event_loop.run(the_loop(), "uvloop")
    assert loop.is_closed()
    assert asyncio.get_event_loop_policy() is policy  # nothing process-wide changed (tests, the demo)
