"""The CPU priority of kvpilot's background work (issue 17): the tick's stage threads and its reader processes run
at a higher niceness than the event loop (the HTTP API, KEDA in ``loop`` mode) and KEDA's own process, so that
when the cores are busy during a tick, those answering calls get a core first and the tick waits instead.

Raising one's own niceness needs no privilege. On Linux ``setpriority(PRIO_PROCESS, tid)`` applies to one thread
(the kernel schedules threads, and a thread's niceness is its own), so a stage thread can lower itself alone;
threads and processes it starts inherit it. Elsewhere, or where the call is refused, nothing changes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)

MAX_NICE = 19

_background_nice = 0  # added to the niceness of each background thread and reader process; 0: left as they are


def configure(nice: int) -> None:
    """Set once at start (``collector.background_nice``): what background work adds to its niceness."""
    global _background_nice
    if nice < 0:
        raise ValueError(f"background niceness must be >= 0 (lower priority only), not {nice}")
    _background_nice = nice


def background_nice() -> int:
    return _background_nice


def lower_this_thread() -> None:
    """In a background thread, first thing: add ``background_nice()`` to this thread's niceness."""
    _lower(_background_nice, "thread")


def lower_this_process(nice: int) -> None:
    """A reader pool's ``initializer`` (with ``initargs=(background_nice(),)``: a spawned process has not read the
    settings): add ``nice`` to the worker's niceness, that of the thread that reads."""
    _lower(nice, "reader process")


def _lower(nice: int, what: str) -> None:
    if nice == 0:
        return
    if not sys.platform.startswith("linux"):
        # elsewhere PRIO_PROCESS with a thread's id names no thread, and os.nice would lower the whole process
        log.debug("background niceness %d not applied to this %s: per-thread priority is Linux-only", nice, what)
        return
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(now + nice, MAX_NICE))
    except OSError as e:  # a sandbox that refuses the call (EPERM, EACCES)
        log.debug("background niceness %d not applied to this %s: %s", nice, what, e)
