"""Injected time, so the same loop runs live, in tests and in a backtest that replays a day in seconds."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Protocol

log = logging.getLogger(__name__)

# A wall clock that moved more than this away from the monotonic one between two readings was stepped (NTP), not
# slewed: slewing moves it by at most 0.5 ms a second.
STEP_S = 1.0
# A server's clock (its answers' Date header, whole seconds) this far from ours or more is allowed for, and said once
# from CLOCK_OFFSET_SAID_S; below it, the header's cut second and the answer's time in flight are the larger error.
CLOCK_OFFSET_ALLOWED_S = 2.0
CLOCK_OFFSET_SAID_S = 10.0


def allowed_offset(offset: float | None) -> float:
    """A server's measured clock offset (its clock less ours) as allowed for: 0 where it is not known, not finite,
    or within ``CLOCK_OFFSET_ALLOWED_S``."""
    if offset is None or not math.isfinite(offset) or abs(offset) < CLOCK_OFFSET_ALLOWED_S:
        return 0.0
    return offset


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


class StepFreeTime:
    """A wall clock's readings with its steps taken out, for what orders or ages a history of its own (the planner's
    forecasters, windows and holds): equal to the wall time until the wall clock steps (NTP: an hour back or ahead),
    then as far from it as the steps add up to, moving between two readings as the monotonic clock did. A step then
    changes nothing but the stamps reported on the wall clock, where a step back of an hour had every new point
    refused for the hour (stamped before the last one) and a step ahead read as an hour gone by."""

    def __init__(self, step_s: float = STEP_S) -> None:
        self.step_s = step_s
        self.offset_s = 0.0  # this time less the wall time
        self._last: tuple[float, float] | None = None  # the last (wall, monotonic) reading
        self._lock = threading.Lock()  # read from the control loop and the drain worker's thread

    def at(self, now: float, monotonic: float) -> float:
        """The step-free time of the wall reading ``now``, taken with the monotonic reading ``monotonic``."""
        with self._lock:
            last, self._last = self._last, (now, monotonic)
            if last is not None:
                step = (now - last[0]) - (monotonic - last[1])
                if abs(step) > self.step_s:
                    self.offset_s -= step
                    log.warning(
                        "the wall clock stepped %+.0f s: the planner's time goes on without the step, %+.0f s from it",
                        step,
                        self.offset_s,
                    )
            return now + self.offset_s
