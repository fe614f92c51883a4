"""A first-in first-out window of floats stored unboxed: 8 bytes a value, not a float object's 24 plus a slot's 8.

`auto` keeps, per horizon and per option, the absolute error of every forecast scored over its 3-hour window
(ten options, one value each a tick per deployment: ~2,200 values a column at 5 s ticks). As a deque of float
objects, that was 32 bytes a value, ~11 MB for 50 deployments after an hour and ~35 MB after three; unboxed it is
8 bytes. Values come back exactly as appended (an ``array('d')`` stores the double's bits), so every sum and test
read from the window is unchanged.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from itertools import islice

# Values popped from the front are only skipped; the array is shifted once this many have been, and at least as many
# as remain (so each value is moved at most once on average, not once per pop).
_COMPACT_AFTER = 256


class FloatWindow:
    """``append`` at the back, ``popleft`` from the front, iteration oldest first: the part of a ``deque[float]``
    `auto`'s scores use."""

    __slots__ = ("_head", "_values")

    def __init__(self) -> None:
        self._values = array("d")
        self._head = 0  # values before it were popped

    def append(self, x: float) -> None:
        self._values.append(x)

    def popleft(self) -> float:
        """Remove and return the oldest value (IndexError when empty)."""
        values, head = self._values, self._head
        if head >= len(values):
            raise IndexError("pop from an empty FloatWindow")
        x = values[head]
        head += 1
        if head >= _COMPACT_AFTER and 2 * head >= len(values):
            del values[:head]
            head = 0
        self._head = head
        return x

    def unboxed(self) -> tuple[array[float], int]:
        """The array the values are in and where they start in it (those before were popped)."""
        return self._values, self._head

    def __len__(self) -> int:
        return len(self._values) - self._head

    def __iter__(self) -> Iterator[float]:
        return islice(self._values, self._head, None)

    def __repr__(self) -> str:
        return f"FloatWindow({list(self)!r})"
