"""kv_exhaustion's load rule reads the planner's demand carried along its own trend (DemandTrend in Detection):
a demand that keeps rising is warned a minute earlier than the forecast alone would, one that holds is not."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from detectors import kv_exhaustion
from detectors.kv_exhaustion import Demand, DemandTrend
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, replica

CAPACITY_RPS = 10.0  # what one ready replica serves


def _demand(forecast: float) -> dict[str, Demand]:
    return {"ml/chat": Demand(capacity_rps=CAPACITY_RPS, forecast_rps=forecast, horizon_s=155.0)}


def _first_warning(
    load_at: Callable[[float], float], usage_at: Callable[[float], float], seconds: float
) -> tuple[float | None, list[str]]:
    """One replica through the real FleetState and Detection (hysteresis included), the loop's order: detect, then
    hand the planner's numbers for the next tick. Returns when a kv_exhaustion finding first opened, and its
    summaries."""
    from collector.state import FleetState

    state, det = FleetState(), Detection(only=["kv_exhaustion"])
    t = 0.0
    while t <= seconds:
        sample = replica("r0", t, kv_usage=usage_at(t), requests_finished=4.0 * t)
        state.observe([sample], [], now=t)
        active = det.tick(state, now=t).active
        if active:
            return t, [f.summary for f in active]
        det.set_demand(_demand(load_at(t) * CAPACITY_RPS))
        t += TICK_S
    return None, []


def test_a_leak_growing_steadily_towards_full_is_warned_a_minute_ahead() -> None:
    # Demand rising steadily by a quarter of a replica a minute from 40 %: it passes what the replica serves at
    # 144 s, and the pool (56-60 %, climbing too slowly for the usage trend to project it full) fills then.
    # Reading the forecast alone (80 % of capacity, 96 s) opens ~40 s ahead; carried 60 s along its trend, > 60 s.
    def load(t: float) -> float:
        return 0.4 + 0.25 * t / 60.0

    full_at = (1.0 - 0.4) / 0.25 * 60.0
    opened, summaries = _first_warning(load, lambda t: 0.56 + 0.0003 * t, full_at)
    assert opened is not None
    assert full_at - opened >= 60.0
    # The text says the demand, its trend, the projected time to exhaustion and that nothing was preempted yet.
    (summary,) = summaries
    assert "of what the ready replicas serve" in summary
    assert "along its trend (+0.25 replicas' worth per minute)" in summary
    assert summary.endswith("exhausted in ~1350 s; no preemptions measured yet")  # the slow usage trend's projection


@pytest.mark.parametrize(
    ("load", "usage"),
    [
        (0.75, 0.75),  # a plateau at 75 % of capacity, 75 % of the pool, no growth: never warned
        (0.78, 0.85),  # just under the load rule, a well-packed pool: the trend adds nothing
    ],
)
def test_a_plateau_with_no_growth_is_not_warned(load: float, usage: float) -> None:
    opened, _ = _first_warning(lambda t: load, lambda t: usage, 600.0)
    assert opened is None


def test_a_demand_that_stopped_rising_lets_the_warning_go() -> None:
    # Demand rose to 75 % and has held there for longer than the trend window: the slope is back to 0, so the
    # load rule reads 75 %, under demand_load.
    trend = DemandTrend(DEFAULT.kv.demand_trend_window_s)
    t, out = 0.0, dict[str, Demand]()
    while t <= 600.0:
        out = trend.observe(t, _demand(min(7.5, 5.0 + 2.5 * t / 60.0)))
        t += TICK_S
    d = out["ml/chat"]
    assert d.replicas_slope_per_s == pytest.approx(0.0)
    assert d.load_ahead(1, DEFAULT.kv.demand_trend_ahead_s) == pytest.approx(0.75)


CASES = [
    # a forecast rising by 3 requests/s a minute on replicas serving 10: +0.3 replicas' worth a minute
    ([5.0 + 0.25 * i for i in range(10)], 0.3 / 60.0),
    # a forecast that holds: no trend
    ([6.0] * 10, 0.0),
    # two ticks: too few to call it a trend
    ([5.0, 6.0], None),
    # an unknown forecast is no point of the trend (the NaN is skipped, not read as 0)
    ([5.0, 5.25, float("nan"), 5.75, 6.0], 0.3 / 60.0),
]


@pytest.mark.parametrize(("forecasts", "slope"), CASES)
def test_demand_trend_is_the_theil_sen_slope_of_the_demand_in_replicas(
    forecasts: list[float], slope: float | None
) -> None:
    trend = DemandTrend(180.0)
    out: dict[str, Demand] = {}
    for i, fc in enumerate(forecasts):
        out = trend.observe(i * TICK_S, _demand(fc))
    got = out["ml/chat"].replicas_slope_per_s
    assert got == (None if slope is None else pytest.approx(slope))


def test_demand_trend_forgets_old_forecasts_and_gone_deployments() -> None:
    trend = DemandTrend(60.0)
    for i in range(30):  # rising for 150 s, then flat for the last 60 s
        trend.observe(i * TICK_S, _demand(5.0 + 0.25 * min(i, 17)))
    assert trend.observe(150.0, _demand(9.25))["ml/chat"].replicas_slope_per_s == pytest.approx(0.0)
    trend.observe(155.0, {})  # the deployment has no numbers this tick: its history goes
    assert trend.observe(160.0, _demand(9.0))["ml/chat"].replicas_slope_per_s is None
    with pytest.raises(ValueError, match="window_s must be > 0"):
        DemandTrend(0.0)


def test_load_ahead_follows_the_trend_and_falls_back_to_the_load() -> None:
    d = Demand(capacity_rps=10.0, forecast_rps=6.0, horizon_s=155.0)
    assert d.load_ahead(2, 60.0) == d.load(2) == pytest.approx(0.3)  # no trend known: the plain load
    rising = Demand(capacity_rps=10.0, forecast_rps=6.0, horizon_s=155.0, replicas_slope_per_s=0.005)
    assert rising.load_ahead(2, 60.0) == pytest.approx((0.6 + 0.3) / 2)
    falling = Demand(capacity_rps=10.0, forecast_rps=6.0, horizon_s=155.0, replicas_slope_per_s=-0.1)
    assert falling.load_ahead(2, 60.0) == 0.0  # never below no demand at all
    assert Demand(capacity_rps=math.nan, forecast_rps=6.0, horizon_s=155.0).load_ahead(2, 60.0) is None
    assert kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=None, horizon_s=0.0).replicas() is None


def _plateau_at(level: float) -> Callable[[float], float]:
    """Demand rising by 0.3 replicas' worth a minute from 40 % until ``level``, then holding."""
    return lambda t: min(level, 0.4 + 0.3 * t / 60.0)


@pytest.mark.parametrize("level", [0.9, 1.1])
def test_a_demand_that_levelled_off_above_the_load_rule_is_not_warned(level: float) -> None:
    # A plateau read at 0.9-1.1 of the planner's steady-state capacity, its pool holding at 60 %: warned while the
    # demand rose (the trend carried it past 0.8), let go once it levelled off (a flat trend adds nothing), and
    # never opened again for the minutes it held (before demand_min_rise: open for as long as it held).
    from collector.state import FleetState

    state, det = FleetState(), Detection(only=["kv_exhaustion"])
    load = _plateau_at(level)
    levelled = (level - 0.4) / 0.3 * 60.0
    open_at: list[float] = []
    t = 0.0
    while t <= levelled + 600.0:
        state.observe([replica("r0", t, kv_usage=0.6, requests_finished=4.0 * t)], [], now=t)
        if det.tick(state, now=t).active:
            open_at.append(t)
        det.set_demand(_demand(load(t) * CAPACITY_RPS))
        t += TICK_S
    assert open_at, "the rise itself is warned"
    assert max(open_at) < levelled + DEFAULT.kv.demand_trend_window_s + 30.0


def test_without_demand_min_rise_the_same_plateau_stays_warned() -> None:
    import dataclasses

    from collector.state import FleetState

    th = dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, demand_min_rise=None))
    state, det = FleetState(), Detection(th, only=["kv_exhaustion"])
    load = _plateau_at(0.9)
    t, last = 0.0, False
    while t <= 1200.0:
        state.observe([replica("r0", t, kv_usage=0.6, requests_finished=4.0 * t)], [], now=t)
        last = bool(det.tick(state, now=t).active)
        det.set_demand(_demand(load(t) * CAPACITY_RPS))
        t += TICK_S
    assert last


def test_a_rising_demand_opens_the_load_rule_and_the_text_says_so() -> None:
    # The load rule on one reading: demand at 85 % of capacity, the pool at 60 %. Rising 0.1 replicas' worth a
    # minute (over demand_min_rise): warned, and the finding still says the projected time to exhaustion and that
    # nothing was preempted yet; flat: not warned by the load rule; trend unknown: the rule as without the gate.
    from tests.unit.detectors.detector_fleet import drive

    state = drive(lambda i, t: ([replica("r0", t, kv_usage=0.6)], []), 5)  # flat: no usage trend, nothing waiting

    def detect(slope_per_min: float | None) -> list[str]:
        slope = None if slope_per_min is None else slope_per_min / 60.0
        demand = {"ml/chat": Demand(CAPACITY_RPS, 8.5, 155.0, replicas_slope_per_s=slope)}
        return [f.summary for f in kv_exhaustion.detect(state, thresholds=DEFAULT, now=20, demand=demand)]

    (summary,) = detect(0.1)
    assert "along its trend (+0.1 replicas' worth per minute)" in summary
    assert summary.endswith("no exhaustion projected by the usage trend yet; no preemptions measured yet")
    assert detect(0.0) == []
    assert detect(0.02) == []
    assert len(detect(None)) == 1
