"""The load's measured rise within a horizon (`scaler.rise.LoadRise`): what a scale-down must still hold."""

from __future__ import annotations

import math

import pytest

from scaler.rise import LoadRise


def test_a_rise_is_measured_once_its_horizon_has_passed() -> None:
    rise = LoadRise(horizon_s=10.0, maxlen=100)
    for t, load in [(0.0, 1.0), (5.0, 3.0), (10.0, 2.0)]:
        rise.observe(t, load)
    # Tick 0's horizon (0, 10] has passed at 10: its load rose to 3 within it.
    assert len(rise.rises) == 1
    assert rise.rises[0] == pytest.approx(2.0)
    rise.observe(15.0, 1.0)  # tick 5's horizon: 3 → 3, no rise
    assert sorted(rise.rises[i] for i in range(len(rise.rises))) == pytest.approx([0.0, 2.0])


def test_margin_is_the_rise_exceeded_in_only_the_share_and_none_before_enough() -> None:
    rise = LoadRise(horizon_s=1.0, maxlen=1000)
    # Alternating load: every other tick rises by 1 within its horizon; the others fall (a rise of 0 at most).
    for i in range(100):
        rise.observe(float(i), 1.0 + (i % 2))
    assert len(rise.rises) == 99
    assert rise.margin(0.01) is None  # fewer than 1 / share measured
    rise.observe(100.0, 1.0)
    assert len(rise.rises) == 100
    assert rise.margin(0.01) == pytest.approx(1.0)
    assert rise.margin(0.6) == pytest.approx(0.0)  # a fall is no rise: never below 0


def test_unmeasured_loads_and_time_going_back_are_skipped() -> None:
    rise = LoadRise(horizon_s=5.0, maxlen=10)
    rise.observe(0.0, None)
    rise.observe(0.0, math.nan)
    rise.observe(0.0, 1.0)
    rise.observe(0.0, 9.0)  # not after the last tick
    rise.observe(5.0, 2.0)
    assert [rise.rises[i] for i in range(len(rise.rises))] == pytest.approx([1.0])
    with pytest.raises(ValueError, match="horizon_s"):
        LoadRise(horizon_s=0.0)
