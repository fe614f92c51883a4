"""`runtime`: how the `kvpilot run` process itself runs (kvpilot.runtime.event_loop)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvpilot.settings._section import _Section

EventLoop = Literal["auto", "uvloop", "asyncio"]


class RuntimeSettings(_Section):
    """How the `kvpilot run` process runs: the event loop that the control loop, the scrapes, the HTTP API and the
    KEDA gRPC server (in the loop's process) share."""

    event_loop: EventLoop = Field(
        default="auto",
        description="`auto`: uvloop (libuv's loop, a dependency of kvpilot) when it can be imported, else asyncio's; "
        "`uvloop`: uvloop or a refusal at start; `asyncio`: the standard library's. uvloop cut `kvpilot run`'s CPU "
        "per 1,000 scrapes by 8 % (BENCHMARKS.md, Scrape loop). The log line at start says which loop runs.",
    )
