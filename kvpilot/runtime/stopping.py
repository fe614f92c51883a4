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


def in_daemon_thread(fn: Callable[[], T], *, name: str) -> asyncio.Future[T]:
    """``fn()`` in a daemon thread of its own, as a future of the running loop. Unlike a shared executor's worker,
    a call that hangs (a store) or that nobody waits for any more (an abandoned tick's stage) neither holds a worker
    nor keeps the interpreter from exiting. Cancelling the future abandons the call; the thread runs to its end."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            future.set_exception(value)  # type: ignore[arg-type]

    def run() -> None:
        outcome: tuple[bool, object]
        try:
            outcome = (True, fn())
        except BaseException as e:  # handed to the awaiting task
            outcome = (False, e)
        with contextlib.suppress(RuntimeError):  # the loop closed while an abandoned call ran: nobody to tell
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
