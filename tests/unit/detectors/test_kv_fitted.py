"""kv_exhaustion's fitted reading (``detectors.kv.rule: fitted``): the formula, its inputs, its wiring."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from detectors import kv_exhaustion, kv_fitted
from detectors.thresholds import DEFAULT
from kvpilot.settings import SettingsError, load_settings
from tests.unit.detectors.detector_fleet import drive, replica

FITTED = dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, rule="fitted"))


def _reading(**kw: Any) -> kv_exhaustion.KvReading:
    """A replica at 60 % with 2 requests/s arriving on a replica serving 10 (demand 1.2 forecast over 2 ready
    replicas at 0.6 of what they serve), a 60 s slope of 6 %/min projecting the pool full in 380 s."""
    fields: dict[str, Any] = {
        "usage": 0.6,
        "peak_usage": 0.65,
        "slope_per_s": 0.001,
        "time_to_exhaustion_s": 380.0,
        "confirm_time_to_exhaustion_s": None,
        "requests_waiting": 0.0,
        "requests_running": 20.0,
        "preemptions_rate": 0.0,
        "in_flight_growth": 0.5,
        "arrival_rate": 2.0,
        "load": 0.6,
        "load_ahead": 0.6,
        "demand": kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=12.0, horizon_s=155.0),
        "demand_rise": 0.05,
        "arrivals_rise": 0.1,
    }
    fields.update(kw)
    return kv_exhaustion.KvReading(**fields)


@pytest.fixture
def coefficients(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """A hand-set formula: only usage and the Little's-law level count."""
    coefs = dict.fromkeys(kv_fitted.COEFFICIENTS, 0.0)
    coefs.update(usage=2.0, level_ahead=1.0)
    monkeypatch.setattr(kv_fitted, "COEFFICIENTS", coefs)
    monkeypatch.setattr(kv_fitted, "INTERCEPT", -2.0)
    monkeypatch.setattr(kv_fitted, "THRESHOLD", 0.5)
    return coefs


def test_the_features_are_the_readings_physical_quantities() -> None:
    x = kv_exhaustion.fitted_features(_reading(), DEFAULT.kv)
    assert x is not None
    assert set(x) == set(kv_fitted.COEFFICIENTS)
    assert x["usage"] == 0.6
    assert x["slope_per_min"] == pytest.approx(0.06)
    assert x["urgency_60s"] == pytest.approx(math.exp(-380.0 / 180.0))
    assert x["urgency_120s"] == 0.0  # the longer trend projects nothing
    assert x["own_load"] == pytest.approx(0.2)
    assert x["in_flight_growth"] == pytest.approx(0.25)
    assert x["waiting"] == 0.0
    assert x["rules"] == 0.0  # the rules stay silent: load 0.6 under demand_load, the trend 380 s from full
    loaded = kv_exhaustion.fitted_features(_reading(load=0.9, load_ahead=0.9), DEFAULT.kv)
    assert loaded is not None
    assert loaded["rules"] == 1.0  # the load rule: 0.9 of capacity, a pool that felt it, demand still rising
    # Little's law 120 s ahead: load max(0.2, 0.6) + 0.1/min x 2 min = 0.8 of capacity (rho 0.8) against 2 req/s
    # now (rho 0.2): 0.6 x (8 / 0.2) / (2 / 0.8) = 9.6, capped at twice full.
    assert x["level_ahead"] == 2.0
    low = kv_exhaustion.fitted_features(
        _reading(load=0.25, load_ahead=0.25, arrivals_rise=0.0, demand_rise=0.0), DEFAULT.kv
    )
    assert low is not None
    assert low["level_ahead"] == pytest.approx(0.6 * (2.5 / 0.75) / (2.0 / 0.8))


def test_the_formula_on_a_hand_built_reading(coefficients: dict[str, float]) -> None:
    x = kv_exhaustion.fitted_features(
        _reading(load=0.25, load_ahead=0.25, arrivals_rise=0.0, demand_rise=0.0), DEFAULT.kv
    )
    assert x is not None
    z = -2.0 + 2.0 * 0.6 + 1.0 * (0.6 * (2.5 / 0.75) / (2.0 / 0.8))  # = 0.0
    assert z == pytest.approx(0.0)
    assert kv_exhaustion.fitted_probability(x) == pytest.approx(0.5)
    assert kv_exhaustion.fitted_probability({**x, "usage": 1.0}) == pytest.approx(1 / (1 + math.exp(-0.8)))
    # far out on either side, no overflow
    assert kv_exhaustion.fitted_probability({**x, "usage": 1e6}) == 1.0
    assert kv_exhaustion.fitted_probability({**x, "usage": -1e6}) == 0.0


def test_the_committed_formula_is_a_probability_and_rises_with_the_pressure() -> None:
    calm = kv_exhaustion.fitted_features(_reading(usage=0.3, peak_usage=0.3, load=0.3, load_ahead=0.3), DEFAULT.kv)
    pressed = kv_exhaustion.fitted_features(
        _reading(usage=0.9, peak_usage=0.95, time_to_exhaustion_s=20.0, confirm_time_to_exhaustion_s=40.0), DEFAULT.kv
    )
    assert calm is not None
    assert pressed is not None
    p_calm, p_pressed = kv_exhaustion.fitted_probability(calm), kv_exhaustion.fitted_probability(pressed)
    assert 0.0 <= p_calm < p_pressed <= 1.0


def test_the_fitted_warning_says_the_probability_and_the_projection(coefficients: dict[str, float]) -> None:
    verdict = kv_exhaustion.judge(_reading(usage=0.9, peak_usage=0.9), FITTED.kv)
    assert verdict is not None
    severity, text = verdict
    assert str(severity) == "warning"
    assert "preemption within 180 s read at 86% (fitted reading)" in text  # z = 2 x 0.9 - 2 + 2 = 1.8
    assert "exhausted in ~380 s" in text
    assert "no preemptions measured yet" in text
    # the same reading under the rules says nothing (nothing waiting, load 0.6, a slow trend)
    assert kv_exhaustion.judge(_reading(usage=0.9, peak_usage=0.9), DEFAULT.kv) is None


@pytest.mark.parametrize(
    "unknown",
    [
        {"arrival_rate": None},
        {"arrival_rate": float("nan")},
        {"arrival_rate": 0.0},  # nothing to scale from
        {"demand": None},
        {"demand": kv_exhaustion.Demand(capacity_rps=float("nan"), forecast_rps=12.0, horizon_s=155.0)},
        {"slope_per_s": None},
        {"load": None, "load_ahead": None},
        {"demand_rise": None},
        {"arrivals_rise": float("nan")},
        {"in_flight_growth": None},
        {"requests_waiting": None},
        {"peak_usage": float("inf")},
    ],
)
def test_an_unknown_input_never_warns(unknown: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kv_fitted, "INTERCEPT", 100.0)  # the formula alone would always warn
    r = _reading(**{"usage": 0.95, "peak_usage": 0.95, **unknown})
    assert kv_exhaustion.fitted_features(r, DEFAULT.kv) is None
    assert kv_exhaustion.judge(r, FITTED.kv) is None


def test_measured_exhaustion_stays_critical_under_the_fitted_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kv_fitted, "INTERCEPT", -100.0)  # the formula alone would never warn
    preempting = kv_exhaustion.judge(_reading(peak_usage=0.99, preemptions_rate=0.2), FITTED.kv)
    queued = kv_exhaustion.judge(_reading(usage=0.95, peak_usage=0.95, requests_waiting=4.0), FITTED.kv)
    assert preempting is not None
    assert queued is not None
    assert str(preempting[0]) == str(queued[0]) == "critical"
    assert kv_exhaustion.judge(_reading(usage=0.95, peak_usage=0.95), FITTED.kv) is None


def test_the_option_is_a_setting_and_refuses_other_values() -> None:
    assert load_settings().detectors.thresholds(tick_s=5.0).kv.rule == "rules"
    s = load_settings(detectors={"kv": {"rule": "fitted"}})
    assert s.detectors.thresholds(tick_s=5.0).kv.rule == "fitted"
    with pytest.raises(SettingsError, match=r"rules.*fitted"):
        load_settings(detectors={"kv": {"rule": "learned"}})


def test_detect_with_the_option_reads_the_formula_and_keeps_its_probability(
    coefficients: dict[str, float],
) -> None:
    # A pool climbing to 85 % with 2 requests/s arriving and finishing behind (more in flight each tick).
    n = 30

    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        usage = min(0.85, 0.3 + 0.02 * i)
        return [replica("r0", t, kv_usage=usage, requests_finished=1.5 * t, requests_running=0.5 * t)], []

    state = drive(tick, n)
    demand = {"ml/chat": kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=4.0, horizon_s=155.0)}
    demand = kv_exhaustion.DemandTrend(180.0).observe(0.0, demand)
    demand = {k: dataclasses.replace(d, replicas_slope_per_s=0.0) for k, d in demand.items()}
    (f,) = kv_exhaustion.detect(state, thresholds=FITTED, now=(n - 1) * 5.0, demand=demand)
    assert "(fitted reading)" in f.summary
    assert f.evidence["fitted_probability"] >= 0.5
    # the rules' finding keeps its evidence as it was
    plain = kv_exhaustion.detect(state, thresholds=DEFAULT, now=(n - 1) * 5.0, demand=demand)
    assert all("fitted_probability" not in g.evidence for g in plain)
