"""Abandoning a tick on shutdown (kvpilot.runtime.stopping): a stage awaited, or running in a thread, ends the tick
at once when the stop flag is set, and a stage's failure caused by the stop reads as the tick abandoned."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

from kvpilot.runtime import stopping
from kvpilot.runtime.stopping import IDLE_NAME, Abandon, TickAbandoned, in_daemon_thread


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


def test_a_daemon_call_outliving_its_loop_ends_quietly(monkeypatch) -> None:
    monkeypatch.setattr(stopping, "IDLE_S", 0.01)
    release = threading.Event()
    done = threading.Event()
    errors: list[object] = []
    hook, threading.excepthook = threading.excepthook, errors.append

    running: list[threading.Thread] = []

    def call() -> int:
        running.append(threading.current_thread())
        release.wait(10)
        return 1

    async def start() -> None:
        in_daemon_thread(call, name="late").add_done_callback(lambda _: done.set())

    try:
        asyncio.run(start())  # the loop closes with the call still running
        deadline = time.monotonic() + 10
        while not running and time.monotonic() < deadline:
            time.sleep(0.001)
        (late,) = running
        assert late.name == "late"
        release.set()
        late.join(10)  # the call returned and tried to tell the closed loop (then, idle IDLE_S, the thread ended)
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


async def test_a_daemon_thread_is_reused_once_idle_and_a_busy_one_never_waited_for() -> None:
    """A call runs in an idle thread left by an earlier call (no thread started per call); while a call hangs, the
    next one gets a thread of its own at once; each call runs in a fresh context, as in a new thread."""
    import contextvars

    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")

    def where() -> tuple[int, str]:
        before = seen.get()
        seen.set("set by an earlier call")
        return threading.get_ident(), before

    first, _ = await in_daemon_thread(where, name="a")
    assert {t.ident: t.name for t in threading.enumerate()}[first] == IDLE_NAME  # idle before it told us
    existing = {t.ident for t in threading.enumerate()}
    second, before = await in_daemon_thread(where, name="b")
    assert second in existing  # an idle thread took it (the first call's, or one an earlier test left)
    assert before == "unset"
    release = threading.Event()
    hung = in_daemon_thread(lambda: release.wait(10), name="hung")
    third, _ = await asyncio.wait_for(in_daemon_thread(where, name="c"), 5)
    assert not hung.done()
    release.set()
    assert await hung is True
    assert third != threading.get_ident()


def test_an_idle_daemon_thread_ends_after_idle_s(monkeypatch) -> None:
    monkeypatch.setattr(stopping, "IDLE_S", 0.05)

    async def one() -> threading.Thread:
        return await in_daemon_thread(threading.current_thread, name="brief")

    t = asyncio.run(one())
    t.join(10)  # whichever thread ran it (new, or idle from an earlier call) waits IDLE_S for another, then ends
    assert not t.is_alive()


async def test_an_idle_daemon_thread_holds_nothing_of_the_call_it_ran() -> None:
    """A tick's stage hands its thread a tick's data and gets a result of the same size: once the caller has both
    and drops them, they are freed while the thread waits idle for its next call (up to IDLE_S)."""

    class Big:
        pass

    given, got = Big(), Big()
    given_ref, got_ref = weakref.ref(given), weakref.ref(got)

    def stage(data: Big = given, result: Big = got) -> Big:
        return result

    future = in_daemon_thread(stage, name="held")
    del given, got, stage
    assert (await future) is got_ref()
    del future
    deadline = time.monotonic() + 5  # the thread drops them just after telling us
    while (given_ref() is not None or got_ref() is not None) and time.monotonic() < deadline:
        await asyncio.sleep(0.001)
        gc.collect()
    assert given_ref() is None
    assert got_ref() is None


def test_a_forked_child_does_not_hand_its_call_to_the_parents_idle_threads() -> None:
    """A fork copies the idle count but not the threads: without the reset, the child's first call would be queued
    for a thread that is not there and never run."""
    import os

    async def one() -> int:
        return await asyncio.wait_for(in_daemon_thread(threading.get_ident, name="fork"), 5)

    asyncio.run(one())  # leaves an idle thread in this process
    assert stopping._idle >= 1
    pid = os.fork()
    if pid == 0:  # the child: 0 when its call ran, 1 when it waited in vain
        try:
            asyncio.run(one())
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
