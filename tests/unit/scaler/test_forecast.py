"""Forecasters on known series: each must track what the series does and survive bad input."""

from __future__ import annotations

import math

import pytest

from scaler.forecast import FORECASTERS, Forecaster, make
from scaler.forecast.base import Forecast
from scaler.forecast.ensemble import Ensemble

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


def test_the_band_is_a_share_once_its_90th_percentile_is_not_the_largest_change() -> None:
    # A series that opens with a ramp (0 -> 30 over 31 steps of 5 s) and then holds, at a 155 s horizon (31 steps):
    # the spread's first changes each span part of the ramp, and the 90th percentile of ten or fewer (index
    # int(0.9 n) = n - 1) is the largest of them: no share. The eleventh change makes it one.
    f = make("last_value")
    values = [30.0 * i / 31 for i in range(32)] + [30.0] * 20
    for i, v in enumerate(values[:32]):
        f.observe(i * 5.0, v)
    assert (f.spread_changes(155.0), f.band_is_share(155.0)) == (1, False)
    assert f.horizon_spread(155.0) == 30.0  # the whole ramp: still the margin asked for
    for i in range(32, 41):
        f.observe(i * 5.0, values[i])
    assert (f.spread_changes(155.0), f.band_is_share(155.0)) == (10, False)
    f.observe(41 * 5.0, values[41])
    assert (f.spread_changes(155.0), f.band_is_share(155.0)) == (11, True)
    auto = make("auto")
    for i in range(60):  # auto's band is its residuals' q90 once 20 are measured, whatever the spread's count
        auto.observe(i * 15.0, 100.0 + (i % 10))
        auto.predict(15.0)
    assert auto.band_is_share(15.0)


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


def _windowed(rates: list[float], step_s: float, window_s: float) -> list[float]:
    """A per-second rate series as a collector reads it: the mean over the trailing window, every step."""
    w, k = int(window_s), int(step_s)
    return [sum(rates[max(0, t - w) : t]) / w for t in range(w, len(rates) + 1, k)]


def _mase(series: list[float], k: int, step_s: float = 15.0, skip: int = 0) -> tuple[float, Ensemble]:
    """`auto`'s forecast error k steps ahead over last value's (the backtest's MASE), after the first `skip`."""
    model = make("auto")
    assert isinstance(model, Ensemble)
    err_model = err_naive = 0.0
    for i, v in enumerate(series[:-k]):
        model.observe(i * step_s, v)
        point = model.predict(k * step_s).point
        if i >= skip:
            err_model += abs(point - series[i + k])
            err_naive += abs(v - series[i + k])
    return err_model / err_naive, model


def _levels(n_steps: int, seconds_each: int, seed: int) -> list[float]:
    """Demand that holds a level for `seconds_each` and then jumps to another (ServeGen's 600 s windows)."""
    import random

    rng = random.Random(seed)
    return [lvl for _ in range(n_steps) for lvl in [rng.uniform(100.0, 250.0)] * seconds_each]


def test_window_ramp_reads_the_level_a_windowed_rate_is_ramping_to() -> None:
    # Demand steps 200 -> 170 at t = 600: the 60 s windowed rate ramps over a minute; 15 s into the ramp the
    # forecast is already the new level (last value still says ~192), and it stays there once the ramp is done.
    series = _windowed([200.0] * 600 + [170.0] * 300, 15.0, 60.0)
    f = make("window_ramp")
    ramp_start = (600 - 60) // 15 + 1
    _feed(f, series[: ramp_start + 1], 15.0)
    assert series[ramp_start] == pytest.approx(192.5)
    assert f.predict(150.0).point == pytest.approx(170.0, abs=1e-6)
    _feed_from = len(series[: ramp_start + 1])
    for i in range(_feed_from, len(series)):
        f.observe(i * 15.0, series[i])
        assert f.predict(150.0).point == pytest.approx(170.0, abs=1e-6)


def test_auto_answers_last_value_where_no_candidate_beats_it() -> None:
    # Random walks: nothing forecasts them better than last value, so `auto` must not pay for trying. A walk
    # drifts for a while by chance, and a trend follower can look better then; the choice's test keeps the
    # price of that small (MASE about 1 on each walk, never far above).
    import random

    mases = []
    for seed in range(4):
        rng = random.Random(seed)
        walk = [100.0]
        for _ in range(400):
            walk.append(max(1.0, walk[-1] + rng.gauss(0.0, 3.0)))
        mase, auto = _mase(walk, 10)
        mases.append(mase)
    assert max(mases) <= 1.05
    assert sum(mases) / len(mases) <= 1.02
    assert auto.chosen(150.0) == "last_value"


def test_auto_chooses_by_the_error_at_the_horizon_asked() -> None:
    # Levels held 10 minutes, seen through a 60 s window: mid-ramp the windowed rate still moves, and only the
    # model that reads where it goes beats last value at the 150 s horizon. `auto` finds it online (MASE < 1)
    # and reports the choice; the blend of every model (the earlier `auto`) lost to last value here.
    series = _windowed(_levels(36, 600, seed=3), 15.0, 60.0)
    mase, auto = _mase(series, 10)
    assert mase < 0.95
    assert auto.chosen(150.0) == "window_ramp"
    live = auto.mase(150.0)
    assert live is not None
    assert live < 1.0


def test_auto_smooths_poisson_noise_around_a_steady_rate() -> None:
    # A steady 2 req/s counted over 60 s windows is noise around a level: a smoother beats last value.
    import numpy as np

    per_s = [float(x) for x in np.random.default_rng(11).poisson(2.0, 3 * 3600)]
    series = _windowed(per_s, 15.0, 60.0)
    mase, auto = _mase(series, 10, skip=200)
    assert mase < 0.9
    assert auto.chosen(150.0).startswith("ewma") or auto.chosen(150.0) in ("linear_trend", "holt", "blend")


def test_auto_measures_its_tail_only_once_it_has_enough_errors_to_tell_it_from_the_largest() -> None:
    # Under-forecasts of 0, 1, ..., 9 repeating (the series rises by its step's noise, last value answers):
    # the 1 % tail needs 100 scored forecasts; the 10 % tail is the 90th percentile of the same residuals.
    model = make("auto")
    assert make("last_value").tail_margin(15.0, 0.01) is None  # a forecaster that measures no errors of its own
    assert isinstance(model, Ensemble)
    horizon = 15.0
    for i in range(60):
        model.observe(i * 15.0, 100.0 + (i % 10))
        model.predict(horizon)
    assert model.tail_margin(horizon, 0.01) is None  # 59 residuals: fewer than 1 / 0.01
    for i in range(60, 400):
        model.observe(i * 15.0, 100.0 + (i % 10))
        model.predict(horizon)
    tail, q90 = model.tail_margin(horizon, 0.01), model.tail_margin(horizon, 0.1)
    assert tail is not None
    assert q90 is not None
    assert q90 <= tail <= max(abs(a - b) for a in range(10) for b in range(10))
    assert model.tail_margin(60.0, 0.01) is None  # a horizon never asked for has no errors measured


def test_auto_tail_is_the_measured_quantile_not_the_largest_error() -> None:
    # 200 measured under-forecasts of 0 .. 199 (shuffled): the 1 % tail is the 99th percentile's rank (int(0.99 x 199)
    # = 197), the 10 % tail rank 179; the largest (199) would over-provision
    model = make("auto")
    assert isinstance(model, Ensemble)
    for i in range(10):
        model.observe(i * 15.0, 100.0)
    model.predict(15.0)  # the horizon's scores exist from its first forecast
    scores = model._by_horizon[15.0]
    for r in (i * 37 % 200 for i in range(200)):
        scores.residuals.append(float(r))
    assert model.tail_margin(15.0, 0.01) == 197.0
    assert model.tail_margin(15.0, 0.1) == 179.0
