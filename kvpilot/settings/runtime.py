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
        default="asyncio",
        description="`asyncio`: the standard library's loop; `uvloop`: libuv's loop (`pip install uvloop`; refused "
        "at start when it cannot be imported); `auto`: uvloop when it can be imported, else asyncio. uvloop cut "
        "`kvpilot run`'s CPU per scrape by ~8 % on a loaded VM and by nothing measurable on a quiet one "
        "(BENCHMARKS.md, Scrape loop), so it is not the default. The log line at start says which loop runs.",
    )
