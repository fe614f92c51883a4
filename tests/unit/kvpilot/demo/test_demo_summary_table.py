"""The demo's printed summary says when its list of desired-replica changes stops short of their count (the default
demo makes 11 and listed 8 with nothing to say the rest were left out)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kvpilot.commands.demo import _print_summary
from kvpilot.demo.replay import DemoSummary


def _printed(changes: int) -> str:
    out = io.StringIO()
    summary = DemoSummary(scale_changes=[(60.0 * i, 2 + i, 3 + i) for i in range(changes)])
    _print_summary(Console(file=out, width=400, color_system=None), summary)
    return next(line for line in out.getvalue().splitlines() if "desired-replica changes" in line)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (0, "│ 0 "),  # none: just the count
        (3, "3 (2→3 at 0s, 3→4 at 60s, 4→5 at 120s)"),  # all of them listed
        (8, "8 (2→3 at 0s, 3→4 at 60s, 4→5 at 120s, 5→6 at 180s, 6→7 at 240s, 7→8 at 300s, 8→9 at 360s, 9→10 at 420s)"),
        (11, "9→10 at 420s, … 3 more)"),  # the eight listed, and how many more
    ],
)
def test_desired_replica_changes_say_how_many_are_left_out(changes: int, said: str) -> None:
    line = _printed(changes)
    assert said in line
    assert ("more)" in line) is (changes > 8)
