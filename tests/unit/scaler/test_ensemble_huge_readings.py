"""`auto` (the ensemble) with readings far past any real rate: a restored history holding 1e300 req/s a minute (a
broken gateway counter's roll-up) gave blend scores past 1e154, and squaring one in `Ensemble.weights` raised
OverflowError out of `predict_from`, the planner's call for a deployment at zero with nothing read. Since 45bcc72 a
restored history is scored at start (`Forecaster.warm`), so one such minute stored was enough."""

from __future__ import annotations

import math

import pytest

from scaler.forecast.ensemble import Ensemble
from scaler.planner import Planner, PlannerConfig

KEY = "prod/llm"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's overflow in the choice test: the choice holds
@pytest.mark.parametrize("huge", [1e160, 1e300, 1.7e308])
def test_a_restored_day_with_huge_readings_still_forecasts_from_zero(huge: float) -> None:
    planner = Planner(PlannerConfig())
    for m in range(1440):  # a day of per-minute roll-ups, one minute in 50 absurd
        planner.warm(KEY, m * 60.0 + 30.0, huge if m % 50 == 0 else 3.0)
    forecaster = planner.planner_for(KEY).forecaster
    assert isinstance(forecaster, Ensemble)
    weights = forecaster.weights()
    assert all(math.isfinite(w) and w >= 0.0 for w in weights)
    assert math.isclose(sum(weights), 1.0)
    # an hour later, scaled to zero and nothing read: the planner's own call (before: OverflowError)
    forecast = forecaster.predict_from(1440 * 60.0 + 3600.0, 300.0)
    assert math.isfinite(forecast.point)
    assert math.isfinite(forecast.upper)
    assert 0.0 <= forecast.point <= forecast.upper


def test_a_score_that_is_not_finite_weighs_nothing() -> None:
    ensemble = Ensemble()
    n = len(ensemble.candidates)
    ensemble._blend_scores = [2.0, math.nan, math.inf, 1e200] + [None] * (n - 4)
    assert ensemble.weights() == [1.0 / n] * n  # not every candidate scored yet: uniform, as before
    ensemble._blend_scores = [2.0, math.nan, math.inf, 1e200] + [4.0] * (n - 4)
    weights = ensemble.weights()
    assert weights[1:4] == [0.0, 0.0, 0.0]
    assert math.isclose(weights[0], 4.0 * weights[4])
    assert math.isclose(sum(weights), 1.0)
    ensemble._blend_scores = [math.nan] * n  # nothing left to weigh: uniform
    assert ensemble.weights() == [1.0 / n] * n
