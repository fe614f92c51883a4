"""SQLite's writers served one at a time in the order they came, the service's own first: one gate per engine.

SQLite lets one transaction write at a time. Without a gate, the others wait in SQLite's busy handler, which
sleeps and tries again (1, 2, 5 ... 100 ms apart), so a writer that happens to try at the right moment goes first,
not the one that waited longest: 24 API writers at once on a starved CPU left one waiting past the 5 s busy
timeout ("database is locked", a 503) while later ones came and went, and the service's own write waited as long
(``/readyz`` 503). Here a unit of work that writes takes its turn at the gate before it opens its connection:

- in order: a writer waits only for those queued ahead of it;
- the service first: the loop's store writer and the service's other writes (drains, targets) are served before
  any API writer still queued, so a crowd of API clients delays them by one API transaction at most;
- an API writer (one serving a request: it has a request deadline) waits at most until that deadline, and is
  refused at once (``WritersQueued``: the API answers 503 with ``Retry-After``, when the writes ahead would be done)
  when the writers ahead of it would take well beyond that (``HOPELESS`` times) at the pace turns have been taking (a
  moving average), or when ``max_queued_requests`` API writers already wait: a crowd the store cannot serve in time is
  told so at once;
- one of the service's writers that waits longer than the busy timeout fails as a busy SQLite does ("database is
  locked"), so every caller's handling of a busy store (the write buffer keeps the writes) is unchanged.

The busy handler still serves what the gate does not see: another process writing the same file.
PostgreSQL has no gate: its writers lock rows, not the database. Measured by ``bench/store_writers.py``
(BENCHMARKS.md, "Many API writers at once on SQLite").
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store.errors import DeadlinePassed, WritersQueued

# API writers that may wait at once, whatever their pace; one more is refused at once. A bound on memory and
# threads more than on time (the pace refuses first): each waits in one of the API's worker threads (anyio's 40).
MAX_QUEUED_REQUESTS = 256
# The weight of the latest turn in the moving average of how long a turn takes (from its start to the next's).
PACE_WEIGHT = 0.2
# An API writer is refused at once only when the writes ahead of it, at that pace, would take this many times the
# time its request has left: a turn's length varies several-fold from one to the next on a loaded node (the first
# turns of a burst open pooled connections), so a wait that merely looks long is queued and ends at the deadline at
# worst; only a hopeless one is refused. At 1, 5 of 50 POSTs at once were refused on a loaded VM (test_rails).
HOPELESS = 2.0
# Why an API writer was not served, the ``reason`` of ``kvpilot_api_writes_refused_total`` (each answered 503 with
# ``Retry-After``): ``max_queued_requests`` already waited; the writes ahead would clearly outlast its request
# (``HOPELESS``); or it queued and its request's deadline came before its turn.
QUEUE_FULL, PACE, DEADLINE = "queue_full", "pace", "deadline"
REFUSAL_REASONS = (QUEUE_FULL, PACE, DEADLINE)


class _Waiter:
    __slots__ = ("turn",)

    def __init__(self) -> None:
        self.turn = threading.Event()


class WriterGate:
    """One writer at a time; ``turn`` waits for it. ``wait_s``: the longest one of the service's writers waits
    (the busy timeout)."""

    def __init__(self, *, wait_s: float, max_queued_requests: int) -> None:
        if wait_s <= 0 or max_queued_requests < 0:
            raise ValueError(f"wait_s must be > 0 and max_queued_requests >= 0, got {wait_s}, {max_queued_requests}")
        self.wait_s = wait_s
        self.max_queued_requests = max_queued_requests
        self._lock = threading.Lock()
        self._service: deque[_Waiter] = deque()
        self._requests: deque[_Waiter] = deque()
        self._owner: int | None = None  # the thread whose turn it is
        self._depth = 0  # its turns inside one another (a writing unit that opens another: as SQLite, not twice)
        self._turn_began = 0.0  # time.monotonic() when the turn now held began (or was passed on)
        self.turn_s = 0.0  # moving average of a turn's length
        self._refused = dict.fromkeys(REFUSAL_REASONS, 0)  # API writers not served, by reason

    @property
    def refused(self) -> dict[str, int]:
        """API writers not served so far, by reason (``REFUSAL_REASONS``, every one from 0)."""
        with self._lock:
            return dict(self._refused)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def queued(self) -> tuple[int, int]:
        """Writers waiting now: (the service's, the API's)."""
        with self._lock:
            return len(self._service), len(self._requests)

    @contextmanager
    def turn(self, *, deadline: float | None) -> Iterator[None]:
        """Wait for this writer's turn and hold it for the block. ``deadline`` (``time.monotonic()``): the request
        this write serves must be answered by then; None for the service's own writes, which go first."""
        self._acquire(deadline)
        try:
            yield
        finally:
            self._release()

    def _acquire(self, deadline: float | None) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None:
                self._owner, self._depth, self._turn_began = me, 1, time.monotonic()
                return
            if deadline is None:
                lane, until = self._service, time.monotonic() + self.wait_s
            else:
                lane, until = self._requests, deadline
                self._admit(deadline)
            waiter = _Waiter()
            lane.append(waiter)
        waiter.turn.wait(max(0.0, until - time.monotonic()))
        with self._lock:
            if waiter.turn.is_set():  # its turn, passed on by the writer before it (even as the wait ran out)
                self._owner = me
                return
            lane.remove(waiter)
            if deadline is not None:
                self._refused[DEADLINE] += 1
        if deadline is not None:
            raise DeadlinePassed("the request timed out while its change waited for the store; nothing was applied")
        raise OperationalError(
            "BEGIN IMMEDIATE",
            None,
            sqlite3.OperationalError(f"database is locked (waited {self.wait_s:g} s for the writers ahead)"),
        )

    def _admit(self, deadline: float) -> None:
        """Refuse an API writer (under ``_lock``) whose turn would not come before ``deadline``; ``WritersQueued`` says
        when the writes ahead would be done."""
        queued = len(self._requests)
        ahead_s = (len(self._service) + queued + 1) * self.turn_s
        if queued >= self.max_queued_requests:
            self._refused[QUEUE_FULL] += 1
        elif ahead_s > HOPELESS * (deadline - time.monotonic()):
            self._refused[PACE] += 1
        else:
            return
        raise WritersQueued(queued, ahead_s)

    def _release(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth > 0:
                return
            now = time.monotonic()
            self.turn_s += PACE_WEIGHT * (now - self._turn_began - self.turn_s)
            self._turn_began = now
            lane = self._service or self._requests
            if not lane:
                self._owner = None
                return
            # the turn passes straight to the first waiter, so no writer arriving meanwhile can take it; the waiter
            # names itself the owner when it wakes
            self._owner, self._depth = _PASSED_ON, 1
            lane.popleft().turn.set()


_PASSED_ON = -1  # the owner from a turn passed on until its waiter wakes

_GATES: weakref.WeakKeyDictionary[Engine, WriterGate] = weakref.WeakKeyDictionary()


def install(engine: Engine, *, wait_s: float) -> WriterGate:
    """Give ``engine`` (a SQLite one) its gate."""
    gate = _GATES[engine] = WriterGate(wait_s=wait_s, max_queued_requests=MAX_QUEUED_REQUESTS)
    return gate


def gate_of(factory: sessionmaker[Session]) -> WriterGate | None:
    """The gate of the engine ``factory`` binds, if it has one (SQLite). A factory that is no ``sessionmaker`` (a
    wrapper, as the tests' stores that go away) has no gate: it binds nothing this module can see."""
    bind = getattr(factory, "kw", {}).get("bind")
    return _GATES.get(bind) if isinstance(bind, Engine) else None


def writers_turn(factory: sessionmaker[Session], *, deadline: float | None = None) -> AbstractContextManager[None]:
    """A writing unit's turn at its engine's gate (``WriterGate.turn``); nothing to wait for without one."""
    gate = gate_of(factory)
    return nullcontext() if gate is None else gate.turn(deadline=deadline)
