"""The event loop `kvpilot run` runs on (`runtime.event_loop`): uvloop (libuv's loop, a C drop-in for asyncio's) or
the standard library's.

Everything of the process shares the one loop: the scrapes (asyncio streams, ``collector.scrape_http``), the control
loop's timers and its worker threads' hand-overs, the HTTP API (uvicorn's ``Server.serve`` runs inside the loop it is
given and does not pick one of its own), the KEDA gRPC server (grpc.aio) in the loop's process, SIGTERM's handler
(``loop.add_signal_handler``) and the reader processes. ``auto`` takes uvloop when it can be imported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from kvpilot.settings import SettingsError
from kvpilot.settings.runtime import EventLoop

T = TypeVar("T")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: EventLoop) -> LoopFactory | None:
    """The factory of ``choice``'s loop (None: asyncio's own, as ``asyncio.run`` makes it; which one runs is
    ``running_loop_name``'s to say). Raises SettingsError when uvloop is asked for and cannot be imported."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as e:
        if choice == "uvloop":
            raise SettingsError(
                f"runtime.event_loop is uvloop, but uvloop cannot be imported ({e}): `pip install uvloop`, or set "
                "runtime.event_loop to auto or asyncio"
            ) from None
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: EventLoop) -> T:
    """``asyncio.run(main)`` on ``choice``'s loop."""
    try:
        factory = loop_factory(choice)
    except SettingsError:
        main.close()  # never started: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop this is called from (the log line at start says it)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.split(".")[0] == "uvloop" else "asyncio"
