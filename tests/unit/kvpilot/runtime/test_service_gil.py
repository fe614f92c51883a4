"""The service shortens the interpreter's GIL switch interval (issue 17): the event loop waits at most ~1 ms, not
CPython's 5 ms, to get the GIL back from a stage in a worker thread after each of its system calls."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.service import GIL_SWITCH_S, shorten_gil_switch
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service


@pytest.fixture
def default_switch() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default
    yield 0.005
    sys.setswitchinterval(before)


async def test_the_service_starts_with_a_short_switch_interval(tmp_path: Path, default_switch: float) -> None:
    clock = VirtualClock(START)
    service, restored, _ = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock))
    await service.start(restored)
    try:
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_S)
    finally:
        service.stop.set()
        await service.wait()


@pytest.mark.parametrize(
    ("current", "asked", "after"),
    [
        (0.005, 0.001, 0.001),  # the default is shortened
        (0.0005, 0.001, 0.0005),  # a shorter one someone chose is kept
    ],
)
def test_shorten_never_lengthens(default_switch: float, current: float, asked: float, after: float) -> None:
    sys.setswitchinterval(current)
    assert shorten_gil_switch(asked) == pytest.approx(current)
    assert sys.getswitchinterval() == pytest.approx(after)
