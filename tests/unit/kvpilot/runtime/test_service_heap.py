"""The heap alive after the first tick is frozen (issue 17): full collections, which stop the event loop for as long
as they trace, no longer trace the imported modules, the app and the wiring; once per process."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.service import FULL_COLLECTION_AFTER, freeze_startup_heap
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks


@pytest.fixture
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()  # another test's service may have frozen this process' heap already
    gc.set_threshold(700, 10, 10)  # CPython's defaults
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def traced() -> int:
    """What a full collection traces now: every generation but the permanent one."""
    return len(gc.get_objects())


async def test_the_first_tick_freezes_the_heap_and_later_ticks_leave_it(
    tmp_path: Path, unfrozen: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    freezes: list[int] = []
    freeze = gc.freeze

    def counted() -> None:
        freezes.append(1)
        freeze()

    monkeypatch.setattr(gc, "freeze", counted)
    clock = VirtualClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock))
    gc.collect()  # earlier tests' garbage is not heap the service keeps: the freeze collects it first
    before = traced()
    await service.start(restored)
    try:
        assert gc.get_freeze_count() == 0  # not before a tick: the first one builds the long-lived state
        await run_ticks(service, timer, 1)
        frozen = gc.get_freeze_count()
        assert frozen >= 0.9 * before  # at least the heap that was there before the service started
        assert traced() < 0.1 * frozen  # a full collection now traces a small part of what it did
        await run_ticks(service, timer, 2)
        assert len(freezes) == 1  # once: later ticks' objects are collected as usual
        assert gc.get_freeze_count() <= frozen
    finally:
        service.stop.set()
        await service.wait()


async def test_no_freeze_when_turned_off(tmp_path: Path, unfrozen: None) -> None:
    clock = VirtualClock(START)
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, ScriptedFleet(clock))
    service.freeze_heap = False
    await service.start(restored)
    try:
        await run_ticks(service, timer, 2)
        assert gc.get_freeze_count() == 0
    finally:
        service.stop.set()
        await service.wait()


class Node:
    def __init__(self) -> None:
        self.me = self


def test_freeze_startup_heap_freezes_once_per_process(unfrozen: None) -> None:
    garbage = Node()  # in a reference cycle: only a collection frees it
    gone = weakref.ref(garbage)
    del garbage
    assert freeze_startup_heap() is True
    assert gone() is None  # collected before the freeze, not kept for ever in the permanent generation
    assert gc.get_freeze_count() > 0
    assert traced() < 0.1 * gc.get_freeze_count()
    assert gc.get_threshold() == (700, 10, FULL_COLLECTION_AFTER)  # full collections spaced out
    assert freeze_startup_heap() is False
