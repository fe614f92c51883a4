"""SIGTERM during a PromQL round's reading (collector.discovery.promql): ``abort()`` ends the reader process with
the round it is reading, and a reader thread stops at its next target, instead of either running to its end."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource, Stopped
from collector.promql.series import read_answers
from tests.helpers.poll import until

NOW = 1_700_000_000.0


def _a_long_round(started: Path) -> list[object]:
    """In the reader process: say the round has begun, then read for a minute (what adapting thousands of replicas
    takes on a busy machine)."""
    started.touch()
    time.sleep(60)
    return []


async def test_abort_ends_the_reader_process_mid_round(tmp_path: Path) -> None:
    source = PromQLSource("http://127.0.0.1:9", reader="process", clock=VirtualClock(NOW))
    try:
        started = tmp_path / "started"
        reading = asyncio.ensure_future(source._in_reader(partial(_a_long_round, started)))  # type: ignore[arg-type]
        await until(started.exists, what="the reader's round to begin")
        workers = list(source._reader._processes.values())  # type: ignore[union-attr]
        t0 = time.monotonic()
        source.abort()
        with pytest.raises(Stopped, match="reader's round abandoned"):
            await asyncio.wait_for(reading, 10.0)
        assert time.monotonic() - t0 < 5.0
        # polled, not joined: the executor's own thread may reap the worker first, and is_alive() lags it briefly
        await until(lambda: not any(w.is_alive() for w in workers), what="the reader process to end", timeout_s=5.0)
    finally:
        await source.aclose()


def test_a_reader_thread_stops_at_its_next_target() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped, match="reading abandoned"):
        read_answers([("q", b'{"status":"success","data":{"resultType":"vector","result":[]}}')], None, {}, NOW,
                     frozenset(), 0.0, stop=stop)  # fmt: skip
    assert read_answers([], None, {}, NOW, frozenset(), 0.0, stop=threading.Event()) == []
