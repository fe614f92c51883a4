"""Forecasters on known series: each must track what the series does and survive bad input."""

from __future__ import annotations

import math

import pytest

from scaler.forecast import FORECASTERS, Forecaster, make
from scaler.forecast.base import Forecast

STEP_S = 10.0
ALL = sorted(FORECASTERS)


def _feed(f: Forecaster, series: list[float], step_s: float = STEP_S) -> None:
    for i, v in enumerate(series):
        f.observe(i * step_s, v)


def _ramp(n: int) -> list[float]:
    return [10.0 + 0.5 * i for i in range(n)]


def _sine(n: int, period: int = 60) -> list[float]:
    return [50.0 + 20.0 * math.sin(2 * math.pi * i / period) for i in range(n)]


def _step(n: int) -> list[float]:
    return [5.0 if i < n // 2 else 25.0 for i in range(n)]


@pytest.mark.parametrize("name", ALL)
def test_empty_forecaster_predicts_zero(name: str) -> None:
    # Without data there is no demand to provision for; never raises.
    assert make(name).predict(60.0) == Forecast(0.0, 0.0, 60.0)


@pytest.mark.parametrize("name", ALL)
def test_constant_series_is_predicted_exactly(name: str) -> None:
    # A flat series must forecast itself at any horizon (no spurious trend or seasonality).
    f = make(name)
    _feed(f, [7.0] * 200)
    fc = f.predict(120.0)
    assert fc.point == pytest.approx(7.0, abs=0.05)
    assert fc.upper >= fc.point


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "bad",
    [
        math.nan,  # NaN from a failed scrape
        math.inf,  # +Inf from a division by a zero window
        -math.inf,  # -Inf likewise
    ],
)
def test_non_finite_input_is_dropped_and_counted(name: str, bad: float) -> None:
    f = make(name)
    _feed(f, [3.0] * 50)
    f.observe(50 * STEP_S, bad)
    fc = f.predict(60.0)
    assert math.isfinite(fc.point)
    assert math.isfinite(fc.upper)
    assert fc.point == pytest.approx(3.0, abs=0.05)
    assert f.rejected_inputs == 1


@pytest.mark.parametrize("name", ALL)
def test_time_going_backwards_is_rejected(name: str) -> None:
    # Out-of-order samples (a restarted exporter) must not corrupt the state.
    f = make(name)
    f.observe(100.0, 1.0)
    f.observe(50.0, 99.0)
    assert f.rejected_inputs == 1
    assert f.predict(0.0).point == pytest.approx(1.0)


@pytest.mark.parametrize("name", ALL)
def test_negative_horizon_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match="horizon_s"):
        make(name).predict(-1.0)


# Trend followers must see a ramp continue; a flat forecaster (last value, EWMA) must not invent a trend.
@pytest.mark.parametrize(
    ("name", "min_ratio_of_true_change"),
    [
        ("holt", 0.5),  # damped trend: at least half the true increase over 12 steps
        ("kalman", 0.8),  # local linear trend: nearly all of it
        ("arima", 0.8),  # (2,1,1) with drift from differencing
        ("sklearn", 0.5),  # learned change over the horizon
        ("linear_trend", 0.4),  # fitted slope, damped by half
    ],
)
def test_ramp_is_extrapolated(name: str, min_ratio_of_true_change: float) -> None:
    series = _ramp(300)
    f = make(name)
    _feed(f, series)
    horizon_s = 12 * STEP_S
    true_change = 0.5 * 12
    fc = f.predict(horizon_s)
    assert fc.point - series[-1] >= min_ratio_of_true_change * true_change
    assert fc.point <= series[-1] + 2 * true_change


def test_last_value_and_ewma_stay_flat_on_a_ramp() -> None:
    series = _ramp(300)
    for name in ("last_value", "ewma"):
        f = make(name)
        _feed(f, series)
        assert f.predict(120.0).point <= series[-1] + 1e-9


def test_seasonal_naive_repeats_the_previous_season() -> None:
    # With a 600 s season (60 steps) the value one season ago at the target time is the forecast.
    series = _sine(240)
    f = make("seasonal_naive", season_s=600.0)
    _feed(f, series)
    horizon_s = 150.0  # 15 steps: the truth is series[239 + 15 - 60]
    expected = series[239 + 15 - 60]
    assert f.predict(horizon_s).point == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("name", ["sklearn", "seasonal_naive"])
def test_seasonal_models_beat_last_value_on_a_sine(name: str) -> None:
    # Over a quarter period a sine changes a lot: models that learn its shape must beat last value.
    period = 40
    series = _sine(600, period)
    k = period // 4
    opts: dict[str, float | int | str] = {"season_s": period * STEP_S} if name == "seasonal_naive" else {}
    model, naive = make(name, **opts), make("last_value")
    err_model = err_naive = 0.0
    for i, v in enumerate(series[:-k]):
        model.observe(i * STEP_S, v)
        naive.observe(i * STEP_S, v)
        if i > 400:
            truth = series[i + k]
            err_model += abs(model.predict(k * STEP_S).point - truth)
            err_naive += abs(naive.predict(k * STEP_S).point - truth)
    assert err_model < 0.5 * err_naive


@pytest.mark.parametrize("name", ALL)
def test_step_is_reached_after_settling(name: str) -> None:
    # After a level shift has persisted, every forecaster forecasts the new level, and the upper bound covers it.
    f = make(name)
    series = _step(300)
    _feed(f, series)
    fc = f.predict(60.0)
    assert fc.point == pytest.approx(25.0, rel=0.1)
    assert fc.upper >= 25.0 * 0.95


def test_upper_reflects_past_volatility() -> None:
    # A noisy series gets a wider upper margin than a smooth one with the same level.
    smooth, noisy = make("last_value"), make("last_value")
    _feed(smooth, [10.0] * 100)
    _feed(noisy, [10.0 + (5.0 if i % 2 else -5.0) for i in range(100)])
    assert noisy.predict(60.0).upper - 10.0 > smooth.predict(60.0).upper - 10.0


class _Broken(Forecaster):
    name = "broken"

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        raise RuntimeError("model exploded")


class _NanModel(Forecaster):
    name = "nan"

    def _predict(self, horizon_s: float) -> tuple[float, float]:
        return math.nan, 1.0


@pytest.mark.parametrize(
    "cls",
    [
        _Broken,  # an exception inside the model
        _NanModel,  # a model that returns garbage
    ],
)
def test_model_failure_falls_back_to_last_value_and_counts(cls: type[Forecaster]) -> None:
    f = cls()
    _feed(f, [1.0, 2.0, 4.0])
    fc = f.predict(30.0)
    assert fc.point == 4.0
    assert fc.fallback
    assert f.fallbacks == 1


def test_forecasts_never_go_negative() -> None:
    # Demand cannot be negative even when a trend model extrapolates a fall.
    f = make("kalman")
    _feed(f, [100.0 - 2 * i for i in range(50)])
    assert f.predict(3600.0).point == 0.0


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", {}, "unknown forecaster"),  # unknown names list the known ones
        ("ewma", {"half_life_s": 0.0}, "half_life_s"),  # bad option names itself
        ("holt", {"alpha": 2.0}, "alpha"),  # out-of-range smoothing constant
        ("sklearn", {"model": "xgb"}, "unknown model"),  # unknown regressor
        ("ewma", {"wrong": 1}, "ewma"),  # unknown option is reported with the forecaster's name
    ],
)
def test_bad_configuration_fails_fast(name: str, options: dict[str, float | int | str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(name, **options)


def test_auto_ensemble_leans_on_the_candidate_that_is_right() -> None:
    # On a sine with a 40-step period, seasonality-aware and learned candidates beat last value; the ensemble's
    # weights must move away from uniform towards them, and its forecast must beat last value.
    from scaler.forecast.ensemble import Ensemble

    period, k = 40, 10
    series = _sine(800, period)
    auto, naive = Ensemble(), make("last_value")
    err_auto = err_naive = 0.0
    for i, v in enumerate(series[:-k]):
        auto.observe(i * STEP_S, v)
        naive.observe(i * STEP_S, v)
        if i > 500:
            truth = series[i + k]
            err_auto += abs(auto.predict(k * STEP_S).point - truth)
            err_naive += abs(naive.predict(k * STEP_S).point - truth)
    assert err_auto < err_naive
    weights = auto.weights()
    assert max(weights) > 1.5 / len(weights)
