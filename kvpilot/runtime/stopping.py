"""How a tick ends when the service stops (SIGTERM): the tick in progress is abandoned at once, whatever stage it is
in, rather than finished.

A tick before its persist stage has decided nothing yet that anyone relies on, and finishing it could take as long
as the tick itself (at 3,000 replicas in PromQL ``replicas`` mode, 7-17 s of reading and adapting: issue 17). So
``Abandon.race`` lets each of the tick's stages run until the stop flag is set and no longer: the stage's coroutine
is cancelled, a stage in a thread is left to end on its own (a daemon thread, which never holds the process's exit),
a collect stage that can (``Abortable``: the PromQL source) drops its queries and its reader, and the tick raises
``TickAbandoned``. Nothing of an abandoned tick is queued for the store; what earlier ticks queued is still flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class TickAbandoned(Exception):
    """The service is stopping: the tick in progress was left in ``stage``, before anything of it was stored."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"the tick in progress was abandoned in its {stage} stage")
        self.stage = stage


@runtime_checkable
class Abortable(Protocol):
    """A collect stage that can drop the tick's work at once on shutdown (the PromQL source: its queries in flight
    and its reader process), so that an abandoned tick leaves nothing running behind it."""

    def abort(self) -> None: ...


class Abandon:
    """A one-way stop flag for the tick in progress: set once, on shutdown; every stage started after it, or running
    when it is set, ends the tick with ``TickAbandoned``."""

    def __init__(self) -> None:
        self._set = asyncio.Event()

    def set(self) -> None:
        self._set.set()

    def is_set(self) -> bool:
        return self._set.is_set()

    def check(self, stage: str) -> None:
        """Raise ``TickAbandoned`` if the flag is set (between stages, and where a stage failed because of it)."""
        if self._set.is_set():
            raise TickAbandoned(stage)

    async def race(self, stage: str, work: Awaitable[T]) -> T:
        """``await work``, unless the flag is set first (or was already): then ``work`` is cancelled and
        ``TickAbandoned`` raised. A failure of ``work`` is raised as it is, unless the flag was set meanwhile."""
        task = asyncio.ensure_future(work)
        if self._set.is_set():
            task.cancel()  # before its first step: a coroutine never starts
            raise TickAbandoned(stage)
        stopper = asyncio.ensure_future(self._set.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
                # It may still end with its own exception (a query aborted at the same moment raises ``Stopped``):
                # retrieved, so that it is not logged as "never retrieved".
                task.add_done_callback(_retrieve)
        if self._set.is_set():
            if task.done():
                _retrieve(task)
            raise TickAbandoned(stage)
        return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


# A daemon thread that has run its call waits this long for the next one before it ends: starting a thread for each
# call cost 70-100 µs of CPU, ~9 times a tick in every process whatever the fleet's size (the tick's stages, the store
# probe); reused, a call costs ~30 µs, as a shared executor's would (issue 17).
IDLE_S = 30.0
IDLE_NAME = "daemon-idle"  # an idle thread's name (a busy one carries its call's)
_idle_lock = threading.Lock()
_idle = 0  # threads waiting on _calls, each counted on to take one call
_Call = Callable[[], Callable[[], None]]  # runs, and returns what tells its caller
_calls: queue.SimpleQueue[tuple[str, _Call]] = queue.SimpleQueue()


def _serve(name: str, first: list[_Call]) -> None:
    """Run the call in ``first``, then the calls handed to this thread while it waits idle, until none comes for
    ``IDLE_S``. The thread counts itself idle before telling a call's caller, so that the caller's next call finds it
    idle instead of starting another thread."""
    global _idle
    me = threading.current_thread()
    call = first.pop()  # taken out: the Thread keeps its arguments as long as it lives
    while True:
        me.name = name
        tell = contextvars.Context().run(call)  # as a new thread would: nothing an earlier call set is seen
        me.name = IDLE_NAME
        with _idle_lock:
            _idle += 1
        tell()
        # Idle, the thread holds nothing of the call it ran: its function and result (a tick's stage holds the tick's
        # pages and snapshot) are freed now, not when the next call comes.
        del call, tell
        try:
            name, call = _calls.get(timeout=IDLE_S)
        except queue.Empty:
            with _idle_lock:  # a call handed over while the wait ended is ours to run; else we end, uncounted
                try:
                    name, call = _calls.get_nowait()
                except queue.Empty:
                    _idle -= 1
                    return


def _forget_idle_threads() -> None:
    """In a forked child: the parent's idle threads were not copied, so none is counted on to take a call (else the
    child's next call would be handed to a thread that does not exist, and wait for ever)."""
    global _idle, _idle_lock, _calls
    _idle_lock = threading.Lock()
    _idle = 0
    _calls = queue.SimpleQueue()


os.register_at_fork(after_in_child=_forget_idle_threads)


def _start(name: str, call: _Call) -> None:
    """``call`` in an idle daemon thread, or in a new one when none is idle: a call never waits for another."""
    global _idle
    with _idle_lock:
        if _idle > 0:
            _idle -= 1
            _calls.put((name, call))
            return
    threading.Thread(target=_serve, args=(name, [call]), name=name, daemon=True).start()


def in_daemon_thread(fn: Callable[[], T], *, name: str) -> asyncio.Future[T]:
    """``fn()`` in a daemon thread of its own, as a future of the running loop. Unlike a shared executor's worker,
    a call that hangs (a store) or that nobody waits for any more (an abandoned tick's stage) neither holds a worker
    nor keeps the interpreter from exiting: the thread runs only this call until it ends (an idle one, left from an
    earlier call, when there is one; a new one otherwise). Cancelling the future abandons the call; the thread runs
    to its end."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(value)  # type: ignore[arg-type]

    def run() -> Callable[[], None]:
        outcome: tuple[bool, object]
        try:
            outcome = (True, fn())
        except BaseException as e:  # handed to the awaiting task
            outcome = (False, e)

        def tell() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while an abandoned call ran: nobody to tell
                loop.call_soon_threadsafe(settle, *outcome)

        return tell

    _start(name, run)
    return future
