"""The live forecast error scores each forecast once its horizon has passed, against the last-value forecast."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scaler.forecast.live_error import LiveMase

HORIZON = 10.0


def _run(series: list[float], forecasts: list[float | None], step: float = 5.0) -> LiveMase:
    m = LiveMase(HORIZON, min_scored=3)
    for i, (v, f) in enumerate(zip(series, forecasts, strict=True)):
        m.record(i * step, v, f)
    return m


@pytest.mark.parametrize(
    ("series", "forecast", "expected"),
    [
        # a ramp forecast exactly (value + slope x horizon) has no error: MASE 0
        ([float(i) for i in range(20)], lambda i, v: v + 2.0, 0.0),
        # forecasting "no change" IS the naive forecast: MASE 1
        ([float(i) for i in range(20)], lambda i, v: v, 1.0),
        # twice the naive error: MASE 2
        ([float(i) for i in range(20)], lambda i, v: v - 2.0, 2.0),
    ],
)
def test_mase_against_last_value(series, forecast, expected):
    m = _run(series, [forecast(i, v) for i, v in enumerate(series)])
    assert m.value() == pytest.approx(expected)


def test_nothing_until_enough_forecasts_have_come_due():
    m = LiveMase(HORIZON, min_scored=3)
    for i in range(4):  # due at 10, 15, 20...: at t=15 only two have been scored
        m.record(i * 5.0, float(i), float(i))
    assert m.value() is None


def test_flat_demand_has_no_scale_so_no_mase():
    m = _run([5.0] * 20, [5.0] * 20)
    assert m.value() is None


def test_unknown_or_non_finite_input_is_skipped_not_scored():
    series = [float(i) for i in range(20)]
    clean = _run(series, [v + 2.0 for v in series])
    noisy = LiveMase(HORIZON, min_scored=3)
    for i, v in enumerate(series):
        noisy.record(i * 5.0, v, v + 2.0)
        noisy.record(i * 5.0 + 1, None, math.nan)
    assert noisy.value() == pytest.approx(clean.value())


def test_old_scores_leave_the_window():
    m = LiveMase(HORIZON, window_s=30.0, min_scored=1)
    for i in range(10):  # a bad forecaster first...
        m.record(i * 5.0, float(i), float(i) - 10.0)
    for i in range(10, 30):  # ...then a perfect one
        m.record(i * 5.0, float(i), float(i) + 2.0)
    assert m.value() == pytest.approx(0.0)


def test_horizon_must_be_positive():
    with pytest.raises(ValueError, match="horizon_s must be > 0"):
        LiveMase(0.0)


@settings(max_examples=500, deadline=None)
# what is left is tiny beside what went: kept, 1 + 1e-152 - 1 reads 0
@example(
    [
        (0.0, 0.0, 10.501714103058488),
        (1.0, None, 13.0),
        (0.0, None, 20.0),
        (0.0, 0.0, 17.0),
        (1.0233572582172073e-152, 0.0, 10.0),
        (0.0, None, 1.0),
    ]
)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1e4, allow_nan=False),  # the value observed
            st.one_of(st.none(), st.floats(0.0, 1e4, allow_nan=False)),  # the forecast made then
            st.floats(0.5, 20.0),  # seconds to the next tick
        ),
        max_size=120,
    )
)
def test_kept_sums_read_as_the_window_summed_afresh(ticks):
    # The sums are kept as scores come and go; the value must be the window's own, whatever the sequence.
    m = LiveMase(HORIZON, window_s=60.0, min_scored=1)
    now = 0.0
    for value, forecast, gap in ticks:
        m.record(now, value, forecast)
        now += gap
        scored = list(m._scored)
        naive = sum(s[2] for s in scored)
        if not scored or naive <= 0:
            assert m.value() is None
        else:
            assert m.value() == pytest.approx(sum(s[1] for s in scored) / naive, rel=1e-9, abs=1e-12)
