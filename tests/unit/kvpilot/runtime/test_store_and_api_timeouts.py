"""The two timeouts an operator sets for a slow store: ``store.hang_after_s`` (when a probe outstanding reads as a
store that hangs, so /readyz turns 503) and ``api.request_timeout_s`` (when an API request waiting on it gets its
503) — both read from settings by what `kvpilot run` builds, not left at the code's defaults."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime import runner
from kvpilot.runtime import service as service_module
from kvpilot.settings import SettingsError, load_settings
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service


async def test_a_probe_outstanding_for_store_hang_after_s_reads_as_a_hung_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the store answers the start-up ping, then a probe never comes back; with hang_after_s 0.3 the service says
    # so within a second or two (the default, 10 s, would not within the 5 s the poll waits)
    answered = threading.Event()
    release = threading.Event()
    pings: list[int] = []

    def ping(engine: object) -> bool:
        pings.append(1)
        if len(pings) > 1:
            answered.set()
            release.wait(10.0)
        return True

    monkeypatch.setattr(service_module, "ping", ping)
    clock = VirtualClock(START)
    overrides = {"store": {"probe_every_s": 0.05, "hang_after_s": 0.3}}
    service, restored, _ = make_service(
        f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock), overrides=overrides
    )
    assert service.store_hang_s == 0.3
    await service.start(restored)
    try:
        await until(answered.is_set, what="a probe outstanding", timeout_s=5.0)
        await until(lambda: service.store_problem() is not None, what="the hang read", timeout_s=5.0)
        assert (service.store_problem() or "").startswith("the store has not answered for")
        assert not service.health().store_up
    finally:
        release.set()
        service.stop.set()
        await service.wait()


def test_the_timeouts_refuse_nonsense() -> None:
    with pytest.raises(SettingsError, match="hang_after_s"):
        load_settings(store={"hang_after_s": 0})
    with pytest.raises(SettingsError, match="request_timeout_s"):
        load_settings(api={"request_timeout_s": -1})


async def test_kvpilot_run_gives_the_api_the_configured_request_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []

    class Built(Exception):
        pass

    def create_app(service: object, auth: object, *, keda_reader: object, request_timeout_s: float) -> object:
        seen.append(request_timeout_s)
        raise Built  # the app is all this test needs; run() stops here

    monkeypatch.setattr(runner, "create_app", create_app)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    settings = load_settings(api={"request_timeout_s": 3.5, "http_port": 0, "grpc_port": 0})
    with pytest.raises(Built):
        await runner.run(settings)
    assert seen == [3.5]


async def test_a_task_still_running_at_shutdown_is_abandoned_after_the_bound_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # shutdown waits for each task at most hang_after_s + one interval, then cancels what is left and says which,
    # without blaming the store for a task that was not waiting on it
    clock = VirtualClock(START)
    overrides = {"store": {"hang_after_s": 0.3}}
    service, restored, _ = make_service(
        f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock), overrides=overrides
    )
    await service.start(restored)
    slow = asyncio.create_task(asyncio.sleep(3600), name="slow-stage")
    service.tasks.append(slow)
    service.stop.set()
    started = time.monotonic()
    await service.wait()
    assert slow.cancelled()
    assert time.monotonic() - started < service.store_hang_s + service.interval_s + 5.0
    assert "task slow-stage had not ended" in caplog.text
