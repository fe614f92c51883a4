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
