"""A deployment scaled to zero with no gateway counter (``kvpilot run`` without ``collector.arrivals``) reads no rate:
the forecast must still look one horizon past now, not past the last reading, so that a daily burst wakes it
ahead; and the history a restart restores counts as arrivals seen (review G, session 18, issue 10)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.state import FleetState
from scaler.capacity import CapacityConfig
from scaler.forecast import make
from scaler.forecast.ensemble import Ensemble
from scaler.planner import Planner, PlannerConfig

KEY, DAY, TICK_S = "prod/llm", 86_400.0, 15.0
BURST_START, BURST_END = 36_000.0, 39_600.0  # 10:00-11:00 each day, 20 req/s; nothing otherwise
AT_ZERO = 3 * DAY + 32_400.0  # 09:00 on day 4: scaled to zero from here on


def _rate(t: float) -> float:
    return 20.0 if BURST_START <= t % DAY < BURST_END else 0.0


def _planner(forecaster: str, *, restarted: bool) -> Planner:
    base = PlannerConfig()
    config = replace(
        base,
        forecaster=forecaster,
        policy=replace(base.policy, min_replicas=0),
        capacity=CapacityConfig(requests_per_s=5.0),
    )
    planner, state = Planner(config), FleetState()
    if restarted:  # three days of per-minute roll-ups, as the store restores them at start
        for m in range(int(AT_ZERO // 60)):
            planner.warm(KEY, m * 60.0 + 30.0, _rate(m * 60.0))
    else:  # this process read every minute itself, the deployment serving until 09:00 on day 4
        for m in range(int(AT_ZERO // 60)):
            t = m * 60.0 + 30.0
            planner.decide(state, t, current_replicas={KEY: 1}, arrival_rates={KEY: _rate(m * 60.0)})
    return planner


def _first_wanted(planner: Planner) -> tuple[float, str] | None:
    """When (seconds into the day) and why the planner first wants a replica over 09:00-12:00 of day 4, at zero
    replicas with nothing read."""
    state = FleetState()
    for i in range(int(3 * 3600 / TICK_S)):
        t = AT_ZERO + i * TICK_S
        (d,) = planner.decide(state, t, current_replicas={KEY: 0})
        if d.desired_replicas > 0:
            return t % DAY, d.reason
    return None


@pytest.mark.parametrize("restarted", [True, False])
@pytest.mark.parametrize("forecaster", ["seasonal_naive", "auto"])
def test_a_daily_burst_wakes_a_deployment_at_zero_ahead_of_it(forecaster: str, restarted: bool) -> None:
    """`auto` too (the default, session 19): the days before showed seasonal naive foreseeing each burst's start
    and end where last value could not; the 22 quiet hours since are evidence for no model, so they neither erase
    that nor replace it with last value's 0, and a restart scores the restored days as the live loop would have."""
    planner = _planner(forecaster, restarted=restarted)
    horizon = planner.config.horizon_s
    first = _first_wanted(planner)
    assert first is not None  # frozen at the last reading's horizon, it never woke (restarted: never decided)
    at, reason = first
    assert reason == "predictive"
    assert BURST_START - horizon - TICK_S <= at < BURST_START  # one horizon ahead, not when demand lands


def test_a_restart_at_zero_forecasts_from_the_restored_history() -> None:
    (d,) = _planner("auto", restarted=True).decide(FleetState(), AT_ZERO, current_replicas={KEY: 0})
    assert d.reason != "no_metrics"


@pytest.mark.parametrize("name", ["seasonal_naive", "auto", "holt", "last_value"])
def test_predict_from_looks_past_now_and_records_nothing(name: str) -> None:
    f = make(name)
    for m in range(int(AT_ZERO // 60)):
        f.observe(m * 60.0 + 30.0, _rate(m * 60.0))
    times = f.times
    before = f.predict(120.0)
    assert f.predict_from(times[-1], 120.0) == before  # nothing unread: predict itself
    later = f.predict_from(3 * DAY + BURST_START - 60.0, 120.0)
    assert f.times == times  # no reading made up for the gap
    assert f.predict(120.0) == before  # and the forecast past the last reading is as it was
    if isinstance(f, Ensemble):
        assert list(f._by_horizon) == [120.0]  # the longer horizon neither scored nor kept
    if name == "seasonal_naive":
        assert later.point == pytest.approx(20.0)


@pytest.mark.parametrize("forecaster", ["seasonal_naive", "auto"])
def test_two_days_at_zero_unread_want_replicas_only_for_the_first_burst(forecaster: str) -> None:
    """Left at zero with nothing read for two days: a replica is wanted from one horizon before the first day's
    burst to its end, and never again: not at night (c7f6298: `seasonal_naive`'s upper bound took the spread of the
    series over the unread hours, 20 req/s, and held a warm pool of 5 from 23:17 to 07:06), and not at the next
    day's burst, which a day back lies in the hours never read (both answer the last reading, 0)."""
    planner = _planner(forecaster, restarted=True)
    horizon = planner.config.horizon_s
    state, wanted = FleetState(), []
    for i in range(int(2 * DAY / TICK_S)):
        t = AT_ZERO + i * TICK_S
        (d,) = planner.decide(state, t, current_replicas={KEY: 0})
        if d.desired_replicas > 0:
            wanted.append(t)
    assert wanted, "never woken"
    assert BURST_START - horizon - TICK_S <= wanted[0] - 3 * DAY < BURST_START
    assert wanted[-1] - 3 * DAY < BURST_END
