"""Injected time, so the same loop runs live, in tests and in a backtest that replays a day in seconds."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (or since the start of a replay)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps, for timing intervals: a wall clock stepped by NTP (an hour back)
        must not stretch or shorten them."""
        ...


class WallClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class VirtualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now  # only moves forward (``advance``, ``set``)

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"cannot advance a clock backwards ({seconds} s)")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"cannot move a clock backwards from {self._now} to {t}")
        self._now = t
