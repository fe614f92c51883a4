"""The one check of number flags: finite and within its lower bound, said by flag."""

from __future__ import annotations

import math

import pytest
import typer

from kvpilot.commands._numbers import ABOVE_ZERO, AT_LEAST_ZERO, Bound, check_numbers

ANY = Bound()  # any finite number


@pytest.mark.parametrize(
    ("bound", "value", "holds"),
    [
        (ABOVE_ZERO, 0.0, False),
        (ABOVE_ZERO, 1e-9, True),
        (AT_LEAST_ZERO, 0.0, True),
        (AT_LEAST_ZERO, -1e-9, False),
        (Bound(0.1), 0.1, True),
        (Bound(0.1), 0.0999, False),
        (ANY, -1e300, True),
        (ANY, math.nan, False),
        (ANY, math.inf, False),
        (AT_LEAST_ZERO, math.inf, False),  # a lower bound alone lets inf through
        (ABOVE_ZERO, math.nan, False),  # and a range check alone lets NaN through
        # an int flag (--seed) past a float's range: OverflowError in math.isfinite
        pytest.param(AT_LEAST_ZERO, 10**400, True, id="int-past-a-float"),
        pytest.param(AT_LEAST_ZERO, -(10**400), False, id="negative-int-past-a-float"),
        (AT_LEAST_ZERO, -1, False),
    ],
)
def test_a_bound_holds_for_finite_numbers_in_range_only(bound: Bound, value: float, holds: bool) -> None:
    assert bound.holds(value) is holds


def test_the_first_bad_flag_is_said_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as exit_:
        check_numbers(
            ("--a", 1.0, ABOVE_ZERO), ("--b", None, ABOVE_ZERO), ("--c", -2.0, Bound(0.5)), ("--d", -1.0, ANY)
        )
    assert exit_.value.exit_code == 2
    assert capsys.readouterr().err == "error: --c must be a finite number >= 0.5, got -2.0\n"


def test_absent_and_good_values_pass() -> None:
    check_numbers(("--a", None, ABOVE_ZERO), ("--b", 0.0, AT_LEAST_ZERO), ("--c", -3.5, ANY))
