"""A page reader that waits for the test before reading, for tests of where pages are read (on the event loop or
off it). It works across processes (the collector reads large pages in a spawned process), so it talks through
files in a folder: ``reading-*`` exists while a read waits, ``gate`` lets every read go on."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from collector.adapt import AdaptedPage, adapt_page
from collector.samples import TargetInfo

GATE_S = 10.0  # the longest a read waits; on the event loop, that long with no other coroutine run


def gated_adapt_page(
    folder: str, body: bytes, target: TargetInfo, timestamp: float, *, content_type: str | None = None
) -> AdaptedPage:
    """``adapt_page``, once the test opened the gate (or after GATE_S). Use as ``partial(gated_adapt_page, folder)``.

    The test opens the gate only once it saw what it counts happen *while* a read waited, so no machine is too slow
    or too fast for it: where the read does not hold the event loop, the test runs and opens the gate at once;
    where it does, the test cannot run until GATE_S passes and the marker is gone."""
    here = Path(folder)
    marker = here / f"reading-{os.getpid()}-{uuid.uuid4().hex}"
    marker.touch()
    try:
        deadline = time.monotonic() + GATE_S
        while not (here / "gate").exists() and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        marker.unlink()
    return adapt_page(body, target, timestamp, content_type=content_type)


def waiting_reads(folder: Path) -> frozenset[str]:
    """The gated reads waiting now, each by a name of its own (one read's wait is told from the next one's)."""
    return frozenset(p.name for p in folder.glob("reading-*"))


def reading(folder: Path) -> bool:
    """Whether a gated read is waiting now."""
    return bool(waiting_reads(folder))


def open_gate(folder: Path) -> None:
    (folder / "gate").touch()
