"""The adaptive margin: given up slowly while the SLO is met, restored at once and held after a miss."""

from __future__ import annotations

import pytest

from scaler.margin import MarginFeedback


def _clean_minutes(m: MarginFeedback, start_min: int, minutes: int) -> float:
    for i in range(start_min, start_min + minutes):
        m.update(60.0 * i, 0.0, 100.0)
    return m.scale


def test_clean_minutes_give_the_margin_up_a_twentieth_at_a_time_down_to_the_floor() -> None:
    m = MarginFeedback()
    assert _clean_minutes(m, 0, 4) == pytest.approx(0.8)
    assert _clean_minutes(m, 4, 30) == pytest.approx(0.0)
    floored = MarginFeedback(floor=0.3)
    assert _clean_minutes(floored, 0, 30) == pytest.approx(0.3)


def test_a_miss_restores_the_whole_margin_and_holds_it_for_an_hour() -> None:
    m = MarginFeedback()
    _clean_minutes(m, 0, 10)
    assert m.scale == pytest.approx(0.5)
    assert m.update(600.0, 0.05, 100.0) == 1.0  # 5 % late against a 1 % target: all of it back
    assert _clean_minutes(m, 11, 59) == 1.0  # clean, but within the hour after the miss: held
    assert _clean_minutes(m, 70, 2) == pytest.approx(0.9)  # an hour on: given up again


@pytest.mark.parametrize(
    ("miss", "requests", "why"),
    [
        (None, 100.0, "nothing measured: no evidence either way"),
        (0.0, 5.0, "five requests prove nothing"),
        (0.008, 100.0, "under the target but over half of it: neither a miss nor clean"),
        (float("nan"), 100.0, "an impossible reading is no reading"),
    ],
)
def test_readings_that_prove_nothing_hold_the_margin(miss: float | None, requests: float, why: str) -> None:
    m = MarginFeedback()
    for i in range(10):
        m.update(60.0 * i, miss, requests)
    assert m.scale == 1.0, why


def test_one_reading_per_period() -> None:
    # A tick every 5 s sees the same minute twelve times: it counts once.
    m = MarginFeedback()
    for i in range(12):
        m.update(5.0 * i, 0.0, 100.0)
    assert m.scale == pytest.approx(0.95)


@pytest.mark.parametrize(
    "bad",
    [{"release": 0.0}, {"floor": 1.5}, {"hold_s": -1.0}, {"target_miss": 0.0}, {"period_s": 0.0}],
)
def test_a_bad_configuration_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="margin feedback"):
        MarginFeedback(**bad)
