"""One way for a test to wait on what another thread, task or process makes true: poll a predicate until it holds,
failing with the name of what never happened. Tests wait on conditions, never on a fixed sleep (CI is loaded)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], *, what: str, timeout_s: float = 15.0, every_s: float = 0.02) -> float:
    """Block until ``predicate()`` is truthy; the seconds it took. Fails naming ``what`` after ``timeout_s``."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 >= timeout_s:
            raise AssertionError(f"never happened within {timeout_s} s: {what}")
        time.sleep(every_s)
    return time.monotonic() - t0


async def until(predicate: Callable[[], object], *, what: str, timeout_s: float = 30.0, every_s: float = 0.005) -> None:
    """In a coroutine: poll ``predicate()``, yielding to the event loop and to worker threads between polls, until
    it is truthy. Fails naming ``what`` after ``timeout_s``."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 >= timeout_s:
            raise AssertionError(f"never happened within {timeout_s} s: {what}")
        await asyncio.sleep(every_s)
