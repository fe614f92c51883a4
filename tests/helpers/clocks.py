"""A virtual clock whose wall time can be stepped the way NTP steps one, for tests of what a step must not change."""

from __future__ import annotations

from collector.clock import VirtualClock


class SteppingClock(VirtualClock):
    """A virtual wall clock that can also be stepped (either way) the way NTP steps one; its monotonic reading
    never steps."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(start)
        self.stepped = 0.0

    def step(self, seconds: float) -> None:
        self._now += seconds
        self.stepped += seconds

    def monotonic(self) -> float:
        return self._now - self.stepped
