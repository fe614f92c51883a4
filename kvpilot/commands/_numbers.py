"""Number flags, checked one way in every subcommand: finite and in range, refused by flag in one line.

A click range alone is not enough: NaN passes it (every comparison with NaN is false) and inf passes a lower bound,
then runs forever, overflows a replay, or waits forever on a hung target. Each command lists its number flags once,
before any work, and a bad one exits 2 with ``error: --flag must be a finite number > 0, got nan``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import typer


@dataclass(frozen=True, slots=True)
class Bound:
    """A lower bound on a flag's value: ``> low`` or ``>= low``; ``low`` None for any finite number."""

    low: float | None = None
    inclusive: bool = True

    def holds(self, value: float) -> bool:
        if not isinstance(value, int) and not math.isfinite(value):  # an int is finite, and may be past a float's range
            return False
        if self.low is None:
            return True
        return value >= self.low if self.inclusive else value > self.low

    def __str__(self) -> str:
        if self.low is None:
            return ""
        return f" {'>=' if self.inclusive else '>'} {self.low:g}"


ABOVE_ZERO = Bound(0.0, inclusive=False)
AT_LEAST_ZERO = Bound(0.0)

# The page cap of the commands that read a page and no settings (`kvpilot scrape`, `parse`, `detect`): the flag that
# stands for `kvpilot run`'s collector.max_body_bytes, with that setting's floor; not given, its default (8 MiB).
PAGE_CAP_FLAG = "--max-body-bytes"
PAGE_CAP = Bound(1024)
PAGE_CAP_HELP = "Largest page read, in bytes (>= 1024; default 8 MiB, as kvpilot run's collector.max_body_bytes)."


def check_numbers(*flags: tuple[str, float | None, Bound]) -> None:
    """Exit 2 at the first ``(flag, value, bound)`` whose value is not a finite number within its bound; an absent
    value (None: the flag was not given and has no default) is fine."""
    for flag, value, bound in flags:
        if value is not None and not bound.holds(value):
            kind = "an integer" if isinstance(value, int) else "a finite number"  # --seed: an int flag is finite
            typer.echo(f"error: {flag} must be {kind}{bound}, got {value}", err=True)
            raise typer.Exit(2)
