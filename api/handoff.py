"""A route handler that touches the store, run in FastAPI's thread pool with one hand-off per request.

FastAPI runs a plain ``def`` handler in its thread pool and then validates its answer in the pool again: two
hand-offs, each waking a worker thread and then the event loop, and during a tick each wake-up waits for the GIL
and for a CPU (issue 17: on a loaded 2-core VM at 10,000 replicas, GET /v1/decisions' p99 during ticks was 77-81 ms
with five hand-offs, /healthz's 24-33 ms with none). ``@in_thread`` makes the handler a coroutine that awaits the
same function in the same pool: its blocking store read still never runs on the loop, and FastAPI validates the
answer (model instances: microseconds) on the loop instead of handing it off a second time."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar
from starlette.concurrency import run_in_threadpool

P = ParamSpec("P")
T = TypeVar("T")


def in_thread(handler: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """``handler`` as a coroutine function with its signature (FastAPI reads the parameters, their annotations and
    the docstring through ``__wrapped__``), run in the thread pool plain ``def`` handlers run in."""

    @functools.wraps(handler)
    async def handed_off(*args: P.args, **kwargs: P.kwargs) -> T:
        return await run_in_threadpool(handler, *args, **kwargs)

    return handed_off


# API handlers that write to the store and hold a worker thread at once; the others wait for one on the event loop, in
# the order they came. They run beside the 40 worker threads every other handler shares (anyio's default), not in
# them: a change waits for SQLite's one writer in its thread (store.writers), so before, 40 changes queued behind a
# slow write held every thread and every read of the store waited with them (a GET waited over 20 s behind 50). 16:
# the turn passes from thread to thread at the writer gate while the loop is busy (with 2, a loop busy reading 400
# requests let the next writer in 2 s after the first two were done).
WRITERS_IN_THREADS = 16
_writers_limiter: RunVar[CapacityLimiter] = RunVar("kvpilot_writers_limiter")


def writers_limiter() -> CapacityLimiter:
    """This event loop's limiter of writing handlers (anyio's limiters belong to the loop that made them)."""
    try:
        return _writers_limiter.get()
    except LookupError:
        limiter = CapacityLimiter(WRITERS_IN_THREADS)
        _writers_limiter.set(limiter)
        return limiter


def writes_in_thread(handler: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """``in_thread`` for a handler that writes to the store: at most ``WRITERS_IN_THREADS`` of them hold a worker
    thread at once, in threads of their own, so that changes waiting for the store never keep reads from a thread."""

    @functools.wraps(handler)
    async def handed_off(*args: P.args, **kwargs: P.kwargs) -> T:
        return await to_thread.run_sync(functools.partial(handler, *args, **kwargs), limiter=writers_limiter())

    return handed_off
