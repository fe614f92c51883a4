"""A sliding window of numbers kept in arrival order and in sorted order at once.

A forecaster's quantiles (the horizon spread's q90, the ensemble's residual q90) are read every tick over a window
that moves by one value a tick: re-sorting the whole window each time is what made them grow with history. Kept
sorted as values come and go (insert the one entering, remove the one leaving), the window's k-th smallest is the
same element a fresh sort would give, so every answer read from it is bit-for-bit what sorting gave.
"""

from __future__ import annotations

import bisect
from collections import deque


class SortedWindow:
    """The last values appended (at most ``maxlen``, if given), readable by rank: ``window[i]`` is the i-th smallest.

    Values must not be NaN (no order places it: a sort of them would not be defined either).
    """

    __slots__ = ("_arrived", "_sorted", "maxlen")

    def __init__(self, maxlen: int | None = None) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"sorted window: maxlen must be >= 1, got {maxlen}")
        self.maxlen = maxlen
        self._arrived: deque[float] = deque()
        self._sorted: list[float] = []

    def append(self, x: float) -> None:
        """Add ``x`` as the newest value; the oldest leaves when the window is full."""
        if self.maxlen is not None and len(self._arrived) >= self.maxlen:
            self.popleft()
        self._arrived.append(x)
        bisect.insort(self._sorted, x)

    def popleft(self) -> float:
        """Remove and return the oldest value."""
        x = self._arrived.popleft()
        # The newest goes after its equals and the oldest is first among its equals, so equal values (0.0 and
        # -0.0 too) stay in arrival order: the list is always exactly what a stable sort of the window gives.
        del self._sorted[bisect.bisect_left(self._sorted, x)]
        return x

    def __len__(self) -> int:
        return len(self._arrived)

    def __getitem__(self, rank: int) -> float:
        return self._sorted[rank]
