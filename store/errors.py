"""Errors the repository raises; the API maps them to 404 and 409 at its edge."""

from __future__ import annotations

import logging
import math


class StoreError(Exception):
    """Base of the store's own errors (not the database driver's)."""


class DeadlinePassed(TimeoutError):
    """The request's deadline passed before its transaction could commit; nothing was applied."""


class WritersQueued(StoreError):
    """An API writer whose turn at SQLite's one writer would not come in time (``store.writers``): refused at once,
    the API answers 503 with ``Retry-After``."""

    def __init__(self, queued: int, ahead_s: float) -> None:
        super().__init__(
            f"{queued} changes are already waiting for the store (about {ahead_s:.1f} s of writes); nothing in this "
            f"request is applied, try again in {_retry_after_s(ahead_s)} s"
        )
        self.queued = queued
        self.ahead_s = ahead_s

    @property
    def retry_after_s(self) -> int:
        """When to try again, in whole seconds (``Retry-After``): when the writes queued ahead would be done at the
        pace turns have been taking, at least 1 (it was 1 whatever waited: a client told to come back in a second met
        the same queue) and at most ``MAX_RETRY_AFTER_S``."""
        return _retry_after_s(self.ahead_s)


# The longest Retry-After the gate's estimate gives: the pace is a moving average of how long turns held the gate, so
# one long turn (a retention pass deleting a big day, a write stalled on the disk) put it at a fifth of that turn, and
# the writers refused meanwhile were told (queued + 1) times it - minutes, up to hours - while the gate freed at once.
MAX_RETRY_AFTER_S = 60


def _retry_after_s(ahead_s: float) -> int:
    return min(MAX_RETRY_AFTER_S, max(1, math.ceil(ahead_s))) if math.isfinite(ahead_s) else 1


class NotFound(StoreError):
    def __init__(self, what: str, ident: object) -> None:
        super().__init__(f"{what} {ident!r} not found")
        self.what = what
        self.ident = ident


class InvalidTransition(StoreError):
    def __init__(self, what: str, ident: object, current: str, wanted: str) -> None:
        super().__init__(f"{what} {ident!r} is {current}; it cannot become {wanted}")
        self.current = current
        self.wanted = wanted


class RailFull(StoreError):
    """An approval would exceed ``drains.max_concurrent``."""

    def __init__(self, limit: int, active: int) -> None:
        super().__init__(f"{active} drain(s) already approved or executing; drains.max_concurrent is {limit}")
        self.limit = limit
        self.active = active


class BudgetSpent(RailFull):
    """An approval would exceed ``drains.budget`` within ``drains.budget_window_s``: a ``RailFull``, so every caller
    that holds a drain back on a full rail holds it back here too (the API answers 409)."""

    def __init__(self, budget: int, spent: int, window_s: float) -> None:
        StoreError.__init__(
            self,
            f"{spent} drain(s) started or approved in the last {window_s:.0f} s or node(s) still cordoned by kvpilot; "
            f"drains.budget is {budget} (a drained node stays cordoned until an operator uncordons it)",
        )
        self.limit = budget
        self.active = spent
        self.window_s = window_s


def driver_words(e: BaseException) -> str:
    """What the database driver said ("database is locked", "could not connect to server…"), on one line: not
    SQLAlchemy's wrapping of it, whose first line can be advice about autoflush and whose later lines echo the
    statement, its parameters and a link. The error's type name where it says nothing."""
    said = getattr(e, "orig", None) or e
    line = (str(said).strip().splitlines() or [""])[0]
    return line.split("(Background on this error")[0].strip() or type(said).__name__


class SaidOnce:
    """A periodic pass's word on a store that is away, once an outage: its first failure a warning, later ones
    debug until a pass gets through, which says the store answers again. (A pass that warned each time it ran said it
    once a tick for the whole outage: two lines every 5 s from the drain passes alone, where the store writer says it
    once.)"""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log = log
        self._what = what
        self.away = False

    def failed(self, e: BaseException) -> None:
        if self.away:
            self._log.debug("%s: store unavailable: %s", self._what, driver_words(e))
            return
        self.away = True
        self._log.warning("%s: store unavailable, retried each tick (said once): %s", self._what, driver_words(e))

    def answered(self) -> None:
        if self.away:
            self.away = False
            self._log.info("%s: the store answers again", self._what)
