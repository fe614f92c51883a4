"""`kvpilot detect --source sim` refuses a run of more ticks than it simulates and names the smallest
``--interval-s`` that runs: that value, typed back, must run (it was rounded to nearest and could be refused)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvpilot.commands.detect import MAX_SIM_TICKS, _check_ticks, smallest_interval


@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False))
def test_the_interval_the_hint_names_runs_and_is_within_a_digit_of_the_bound(duration_s: float) -> None:
    hint = float(smallest_interval(duration_s))
    _check_ticks(duration_s, hint)  # no SystemExit: the value printed runs
    assert duration_s / MAX_SIM_TICKS <= hint * (1 + 1e-12)
    assert hint <= duration_s / MAX_SIM_TICKS * (1 + 3e-5)  # six significant digits, rounded up


@pytest.mark.parametrize(("duration_s", "hint"), [(123456.1, "1.23457"), (600.0, "0.006"), (100001.0, "1.00001")])
def test_the_hint_rounds_up(duration_s: float, hint: str) -> None:
    # 123456.1 s printed 1.23456 with :g, which --interval-s then refused (1.23456 s is 100,000.08 ticks)
    assert smallest_interval(duration_s) == hint
