"""Background work at a lower CPU priority (collector.priority, issue 17): the tick's stage threads and its reader
processes run at ``collector.background_nice`` more niceness than the thread that started them; the event loop's
thread keeps its own; 0 changes nothing."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector import priority
from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.samples import TargetInfo
from collector.scrape import Collector, ScrapeConfig
from kvpilot.runtime.stopping import in_daemon_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")

LARGE_PAGE = b"# a page above inline_max_bytes, so it is read in the reader process\n" * 64


def _nice() -> int:
    """This thread's niceness, as the kernel reads it (/proc/self/task/<tid>/stat, field 19)."""
    stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])  # fields after "(comm)" start at field 3


def _nice_of_reader(*_: object, **__: object) -> int:
    """In the reader process, as its adapt function or its round: the niceness it reads at."""
    return _nice()


def _nice_of_round(*, stop: object = None) -> list[int]:
    return [_nice()]


@pytest.fixture
def background_nice() -> Iterator[None]:
    yield
    priority.configure(0)


@pytest.mark.parametrize(
    ("nice", "added"),
    [
        (0, 0),  # off: a stage thread runs at the loop's own niceness
        (5, 5),  # the setting's niceness added to the loop's
        (priority.MAX_NICE, None),  # capped at the kernel's most (19), wherever the loop starts
    ],
)
async def test_a_stage_thread_runs_at_the_background_niceness_and_the_loop_thread_keeps_its_own(
    background_nice: None, nice: int, added: int | None
) -> None:
    loop_nice = _nice()
    priority.configure(nice)
    in_thread = await in_daemon_thread(_nice, name="tick-observe")
    assert in_thread == (priority.MAX_NICE if added is None else min(loop_nice + added, priority.MAX_NICE))
    assert _nice() == loop_nice  # the event loop's thread is left as it was
    assert await asyncio.to_thread(_nice) == loop_nice  # and so is the default executor (the API's store hand-offs)


@pytest.mark.parametrize("nice", [0, 5])
async def test_the_page_reader_process_reads_at_the_background_niceness(background_nice: None, nice: int) -> None:
    loop_nice = _nice()
    priority.configure(nice)
    config = ScrapeConfig(inline_max_bytes=len(LARGE_PAGE) - 1)
    async with Collector(config, clock=VirtualClock(0.0), adapt=_nice_of_reader) as collector:  # type: ignore[arg-type]
        read = await collector._read(LARGE_PAGE, TargetInfo(url="http://10.0.0.1:8000/metrics"), 0.0, None)
    assert read == min(loop_nice + nice, priority.MAX_NICE)
    assert _nice() == loop_nice


@pytest.mark.parametrize("nice", [0, 5])
async def test_the_promql_answer_reader_process_reads_at_the_background_niceness(
    background_nice: None, nice: int
) -> None:
    loop_nice = _nice()
    priority.configure(nice)
    source = PromQLSource("http://127.0.0.1:9", reader="process", clock=VirtualClock(0.0))
    try:
        assert await source._in_reader(_nice_of_round) == [min(loop_nice + nice, priority.MAX_NICE)]  # type: ignore[arg-type]
    finally:
        await source.aclose()
    assert _nice() == loop_nice


def test_a_refused_call_changes_nothing_and_says_so(
    background_nice: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    priority.configure(5)
    with caplog.at_level("DEBUG", logger="collector.priority"):
        priority.lower_this_thread()
    assert "background niceness 5 not applied to this thread" in caplog.text


def test_a_negative_niceness_is_refused() -> None:
    with pytest.raises(ValueError, match="lower priority only"):
        priority.configure(-1)
