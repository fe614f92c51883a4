"""Abandoning a tick on shutdown (kvpilot.runtime.stopping): a stage awaited, or running in a thread, ends the tick
at once when the stop flag is set, and a stage's failure caused by the stop reads as the tick abandoned."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from kvpilot.runtime.stopping import Abandon, TickAbandoned, in_daemon_thread


async def test_a_stage_runs_to_its_result_while_the_flag_is_clear() -> None:
    async def stage() -> int:
        await asyncio.sleep(0)
        return 7

    assert await Abandon().race("collect", stage()) == 7


async def test_a_stage_after_the_flag_never_starts() -> None:
    started = []

    async def stage() -> None:
        started.append(True)

    flag = Abandon()
    flag.set()
    with pytest.raises(TickAbandoned, match="abandoned in its discover stage") as e:
        await flag.race("discover", stage())
    assert e.value.stage == "discover"
    await asyncio.sleep(0)
    assert started == []


async def test_the_flag_cancels_an_awaited_stage_at_once() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def stage() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()

    flag = Abandon()
    running = asyncio.ensure_future(flag.race("collect", stage()))
    await asyncio.wait_for(started.wait(), 5.0)  # the stage is running when the flag is set
    flag.set()
    with pytest.raises(TickAbandoned):
        await asyncio.wait_for(running, 1.0)
    assert cancelled.is_set()


async def test_the_flag_leaves_a_stage_in_a_thread_behind() -> None:
    release = threading.Event()
    started, ended = threading.Event(), threading.Event()

    def stage() -> str:
        started.set()
        release.wait(10)
        ended.set()
        return "late"

    flag = Abandon()
    running = asyncio.ensure_future(flag.race("observe", in_daemon_thread(stage, name="tick-observe")))
    assert await asyncio.to_thread(started.wait, 5.0)  # the stage's thread is running when the flag is set
    t0 = time.monotonic()
    flag.set()
    with pytest.raises(TickAbandoned):
        await asyncio.wait_for(running, 1.0)
    assert time.monotonic() - t0 < 1.0
    assert not ended.is_set()  # not waited for
    release.set()
    assert await asyncio.to_thread(ended.wait, 5)  # it ran to its end on its own; its result is dropped


async def test_a_failure_caused_by_the_stop_reads_as_abandoned() -> None:
    flag = Abandon()

    async def stage() -> None:
        flag.set()  # as a PromQL source's abort makes its query raise
        raise RuntimeError("query abandoned")

    with pytest.raises(TickAbandoned):
        await flag.race("collect", stage())


async def test_a_failure_without_the_stop_is_raised_as_it_is() -> None:
    async def stage() -> None:
        raise RuntimeError("Prometheus answered 500")

    with pytest.raises(RuntimeError, match="500"):
        await Abandon().race("collect", stage())


def test_a_daemon_call_outliving_its_loop_ends_quietly() -> None:
    release = threading.Event()
    done = threading.Event()
    errors: list[object] = []
    hook, threading.excepthook = threading.excepthook, errors.append

    def call() -> int:
        release.wait(10)
        return 1

    async def start() -> None:
        in_daemon_thread(call, name="late").add_done_callback(lambda _: done.set())

    try:
        asyncio.run(start())  # the loop closes with the call still running
        (late,) = [t for t in threading.enumerate() if t.name == "late"]
        release.set()
        late.join(10)  # the call returned and tried to tell the closed loop
        assert not late.is_alive()
    finally:
        threading.excepthook = hook
    assert errors == []
    assert not done.is_set()


async def test_a_stage_failing_as_it_is_cancelled_is_not_logged_as_never_retrieved(caplog) -> None:
    flag = Abandon()
    started, aborted = asyncio.Event(), asyncio.Event()

    async def stage() -> None:
        started.set()
        try:
            await aborted.wait()
        except asyncio.CancelledError:
            raise RuntimeError("Stopped: query abandoned") from None  # what a cancelled PromQL query raises

    async def tick() -> bool:
        try:
            await flag.race("collect", stage())
        except TickAbandoned:
            return True  # no traceback kept: it would keep the stage's task alive, and its complaint unsaid
        return False

    running = asyncio.ensure_future(tick())
    await asyncio.wait_for(started.wait(), 5.0)
    flag.set()
    assert await running
    await asyncio.sleep(0.01)
    gc.collect()  # "Task exception was never retrieved" is logged when the task is collected
    assert "never retrieved" not in caplog.text
