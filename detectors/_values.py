"""Reading numbers that came from outside: a NaN or an infinity is unknown, never a value to act on."""

from __future__ import annotations

import math


def finite(value: float | None) -> float | None:
    """``value`` when it is a finite number, else None (unknown)."""
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value)


def fraction(value: float | None) -> float | None:
    """A 0..1 gauge (KV usage, utilisation): unknown when not finite, clamped into [0, 1] otherwise (an exporter
    that reports 1.02 means full, not more than full)."""
    v = finite(value)
    return None if v is None else min(1.0, max(0.0, v))
