"""SIGTERM during direct scraping (collector.scrape): ``Collector.abort()`` ends the page reader process with the page
it is reading, that page and those queued behind it raise ``Stopped``, and later rounds refuse at once, instead of
the reader running each page to its end while the service waits to exit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import AdaptedPageLike, Collector, ScrapeConfig, Stopped
from kvpilot.runtime.stopping import Abortable
from tests.helpers.poll import until

LARGE_PAGE = b"# a page above inline_max_bytes, so it is read in the reader process\n" * 64


def _a_long_read(started: Path, body: bytes, target: TargetInfo, started_ts: float, **_: object) -> AdaptedPageLike:
    """In the reader process: say the read has begun, then read for a minute (a huge page on a busy machine)."""
    started.touch()
    time.sleep(60)
    raise AssertionError("the read should have been abandoned")


def _a_blocked_read(
    begun: threading.Event, release: threading.Event, body: bytes, *_: object, **__: object
) -> AdaptedPageLike:
    """In a stand-in reader thread: say the read has begun, then wait for the test."""
    begun.set()
    release.wait(30.0)
    raise ValueError("released")


class _LargePages:
    """A stand-in fetcher: ``LARGE_PAGE`` for every URL, the URLs asked kept."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        self.asked.append(url)
        return LARGE_PAGE, "text/plain"

    async def aclose(self) -> None:
        pass


def _collector(started: Path, fetcher: _LargePages) -> Collector:
    config = ScrapeConfig(timeout_s=120.0, inline_max_bytes=len(LARGE_PAGE) - 1)
    return Collector(config, clock=VirtualClock(0.0), adapt=partial(_a_long_read, started), fetcher=fetcher)


def _target(n: int) -> TargetInfo:
    return TargetInfo(url=f"http://10.0.0.{n}:8000/metrics")


def test_the_scraping_collector_is_abortable() -> None:
    assert isinstance(Collector(clock=VirtualClock(0.0)), Abortable)  # so ControlLoop.abandon() aborts it


async def test_abort_ends_the_reader_process_mid_page(tmp_path: Path) -> None:
    started = tmp_path / "started"
    fetcher = _LargePages()
    async with _collector(started, fetcher) as collector:
        collecting = asyncio.ensure_future(collector.collect_once([_target(1)]))
        await until(started.exists, what="the reader's read of the page to begin")
        workers = list(collector._reader._processes.values())  # type: ignore[union-attr]
        assert workers
        t0 = time.monotonic()
        collector.abort()
        with pytest.raises(Stopped, match="page reader's read abandoned"):
            await asyncio.wait_for(collecting, 10.0)
        assert time.monotonic() - t0 < 5.0
        # polled rather than joined: the executor's own thread reaps the worker too, and a join that loses that race
        # finds it "alive" until the executor records its exit
        await until(lambda: not any(w.is_alive() for w in workers), what="the reader process to end", timeout_s=5.0)
        assert collector.health.snapshot() == {}  # stopping is no target's failure

        # every later round refuses at once, before fetching anything
        with pytest.raises(Stopped, match="stopping, no page read"):
            await collector.collect_once([_target(2)])
        with pytest.raises(Stopped, match="stopping, no page read"):
            await collector.scrape(_target(3))
        assert fetcher.asked == [_target(1).url]
        assert collector._reader is None  # and no new reader was started


async def test_the_pages_queued_behind_the_one_being_read_stop_too(tmp_path: Path) -> None:
    started = tmp_path / "started"
    async with _collector(started, _LargePages()) as collector:
        # One reader process: the first page is read, the second is handed to it already (ProcessPoolExecutor queues
        # one call ahead), the others wait in the executor (abort cancels them there).
        reads = [asyncio.ensure_future(collector.scrape(_target(n))) for n in (1, 2, 3, 4)]
        await until(started.exists, what="the reader's read of the first page to begin")
        collector.abort()
        outcomes = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), 10.0)
        assert all(isinstance(o, Stopped) for o in outcomes), outcomes  # not a cancellation of the caller's task


async def test_pages_cancelled_in_the_readers_queue_raise_stopped() -> None:
    # Which of the queued pages abort() cancels and which the broken pool fails is a race inside ProcessPoolExecutor;
    # a one-thread stand-in reader makes the cancellation certain: both pages behind the first are cancelled there.
    begun, release = threading.Event(), threading.Event()
    config = ScrapeConfig(timeout_s=120.0, inline_max_bytes=len(LARGE_PAGE) - 1)
    adapt = partial(_a_blocked_read, begun, release)
    async with Collector(config, clock=VirtualClock(0.0), adapt=adapt, fetcher=_LargePages()) as collector:
        collector._reader = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # type: ignore[assignment]
        reads = [asyncio.ensure_future(collector.scrape(_target(n))) for n in (1, 2, 3)]
        try:
            await until(begun.is_set, what="the first page's read to begin")
            collector.abort()
            queued = await asyncio.wait_for(asyncio.gather(*reads[1:], return_exceptions=True), 10.0)
            assert [type(o) for o in queued] == [Stopped, Stopped], queued
            assert all("in the reader's queue" in str(o) for o in queued)
        finally:
            release.set()
            await asyncio.gather(*reads, return_exceptions=True)


async def test_a_cancelled_scrape_stays_cancelled_after_abort(tmp_path: Path) -> None:
    started = tmp_path / "started"
    async with _collector(started, _LargePages()) as collector:
        reads = [asyncio.ensure_future(collector.scrape(_target(n))) for n in (1, 2)]
        await until(started.exists, what="the reader's read of the first page to begin")
        collector.abort()
        reads[1].cancel()  # the control loop cancels its abandoned tick as the collector aborts
        outcomes = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), 10.0)
        assert isinstance(outcomes[0], Stopped)
        assert isinstance(outcomes[1], asyncio.CancelledError)
