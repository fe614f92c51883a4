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


def _rises(rise: LoadRise) -> list[float]:
    return [rise.rises[i] for i in range(len(rise.rises))]


def test_a_gap_in_readings_is_no_rise_across_it() -> None:
    # 400 flat ticks at 5 s, then no reading for 20 minutes (the planner skipped its ticks), then a load twice as high.
    rise = LoadRise(horizon_s=300.0)
    for i in range(400):
        rise.observe(5.0 * i, 1.0)
    assert len(rise.rises) == 340  # the last 60 ticks' horizons are still open
    assert rise.margin(0.01) == 0.0
    last = 5.0 * 399
    rise.observe(last + 1200.0, 2.0)
    # Of the 60 open ticks, the 6 whose horizon ended within 30 s (a tenth of it) of the last reading closed as they
    # stood (no rise); the other 54 went unread too long: their rise is unknown, dropped, not counted as 0 either.
    assert len(rise.rises) == 346
    for j in range(1, 340):  # ~28 minutes of the new load after the gap
        rise.observe(last + 1200.0 + 5.0 * j, 2.0)
        # The jump came 20 minutes after every open tick: none of them saw it within its horizon.
        assert rise.margin(0.01) == 0.0
    assert max(_rises(rise)) == 0.0


def test_a_reading_past_a_ticks_horizon_is_not_in_it() -> None:
    rise = LoadRise(horizon_s=10.0, maxlen=100)
    rise.observe(0.0, 1.0)
    rise.observe(5.0, 1.0)
    rise.observe(12.0, 5.0)  # a tick late: past tick 0's horizon (0, 10], within tick 5's (5, 15]
    assert _rises(rise) == pytest.approx([0.0])
    rise.observe(17.0, 5.0)
    assert sorted(_rises(rise)) == pytest.approx([0.0, 4.0])


def test_ticks_far_apart_against_the_horizon_are_each_read_not_a_gap() -> None:
    # Readings a minute apart under a 300 s horizon: each spacing is longer than a tenth of the horizon but usual.
    rise = LoadRise(horizon_s=300.0, maxlen=1000)
    for i in range(20):
        rise.observe(60.0 * i, 1.0 + (i % 2))
    assert len(rise.rises) == 15
    assert max(_rises(rise)) == pytest.approx(1.0)
