"""The backtest end to end on the real simulator: the JSON contract, one planner configuration with `kvpilot run`,
and the frontier as a bound no policy beats."""

from __future__ import annotations

import json
from math import inf

import numpy as np
import pytest

from kvpilot.commands.config import effective
from scaler.backtest.frontier import Frontier, FrontierPoint, envelope, fleet_counts
from scaler.backtest.result import MissedMinute, worst_minutes
from scaler.backtest.run import BacktestConfig, Report, backtest
from tests.helpers.burst_backtest import BurstBacktest

KEYS = {"slo_attainment", "replica_hours", "p50_ttft_s", "p99_ttft_s", "scale_events", "cost_usd", "frontier_ratio"}
TARGETS = [0.95, 0.98, 0.99, 0.995, 0.999]


@pytest.fixture(scope="module")
def report(burst: BurstBacktest) -> Report:
    """reactive, kvpilot and wva on a 10-minute burst (tests/helpers/burst_backtest.py), shared for the session."""
    assert burst.report is not None
    return burst.report


def test_json_contract(report) -> None:  # type: ignore[no-untyped-def]
    out = report.to_json()
    assert {"policies", "forecast", "kvpilot_config", "frontier"} <= set(out)
    assert set(out["policies"]) == {"reactive", "kvpilot", "wva"}
    for name, numbers in out["policies"].items():
        assert set(numbers) == KEYS | {"worst_minutes"}  # request level: where each policy missed
        outside = round((1 - report.policies[name].slo_attainment) * report.policies[name].requests)
        minutes = numbers["worst_minutes"]
        assert bool(minutes) == (outside > 0)
        assert sum(m["outside"] for m in minutes) <= outside
        assert all(0 < m["outside"] <= m["arrived"] and m["start_s"] % 60 == 0 for m in minutes)
        assert [m["outside"] for m in minutes] == sorted((m["outside"] for m in minutes), reverse=True)
        assert 0.0 <= numbers["slo_attainment"] <= 1.0
        assert numbers["replica_hours"] > 0
        assert numbers["p50_ttft_s"] <= numbers["p99_ttft_s"]
    assert [f["slo_target"] for f in out["frontier"]] == TARGETS
    json.dumps(out, allow_nan=False)  # finite numbers only


def test_every_policy_replays_the_same_requests(report) -> None:  # type: ignore[no-untyped-def]
    assert len({r.requests for r in report.policies.values()}) == 1


def test_the_burst_makes_every_policy_scale(report) -> None:  # type: ignore[no-untyped-def]
    for name, r in report.policies.items():
        assert max(r.replicas) > r.replicas[0], name


def test_no_policy_lands_below_the_frontier(report) -> None:  # type: ignore[no-untyped-def]
    for name in report.policies:
        ratio = report.frontier_ratio(name)
        assert ratio is None or ratio >= 0.999, (name, ratio)


def test_the_backtest_runs_the_configuration_kvpilot_run_uses(report) -> None:  # type: ignore[no-untyped-def]
    # Only the replica's serving profile differs: `kvpilot run` learns capacity unless one is configured, the
    # backtest hands kvpilot the simulated replica's profile as an operator would configure it.
    live = effective(None)["planner"]
    tested = json.loads(json.dumps(report.kvpilot_config))
    assert live["capacity"]["profile"] is None
    assert tested["capacity"]["profile"] is not None
    live["capacity"]["profile"] = tested["capacity"]["profile"]
    assert tested == live


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policies": ("reactive", "magic")}, "unknown policies"),  # a typo names itself
        ({"fidelity": "exact"}, "fidelity"),  # only request or fluid
        ({"policies": ()}, "no policies"),  # nothing to compare
        ({"max_replicas": 0}, "max_replicas"),  # a ceiling below the floor
    ],
)
def test_bad_configuration_is_refused(kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        BacktestConfig(**kwargs)


def test_envelope_keeps_the_lower_convex_hull() -> None:
    pts = [
        FrontierPoint(0.90, 1.0, 1.0),
        FrontierPoint(0.95, 3.0, 2.0),  # above the chord from (0.90, 1) to (0.99, 2): a mixture does better
        FrontierPoint(0.99, 2.0, 3.0),
        FrontierPoint(0.98, 2.5, 4.0),  # dominated: (0.99, 2.0) is better and cheaper
    ]
    hull = envelope(pts)
    assert [(p.slo_attainment, p.replica_hours) for p in hull] == [(0.90, 1.0), (0.99, 2.0)]
    f = Frontier(hull)
    assert f.replica_hours_at(0.945) == pytest.approx(1.5)
    assert f.replica_hours_at(0.995) is None  # above what any schedule reached
    assert f.ratio(0.945, 3.0) == pytest.approx(2.0)


def test_envelope_keeps_points_below_the_chord() -> None:
    # Costs rise faster as attainment nears 1: every point lies below the chord of its neighbours and stays.
    pts = [FrontierPoint(0.07, 0.28, 0.0), FrontierPoint(0.97, 0.63, 1.0), FrontierPoint(0.99, 0.92, 2.0)]
    assert envelope(pts) == tuple(pts)


def test_fleet_counts_order_each_window_a_cold_start_ahead() -> None:
    # 120 s cold start, 60 s windows: a window's replicas are held from two windows before it.
    assert fleet_counts([1, 1, 1, 5, 1, 1], 120.0) == [1, 5, 5, 5, 1, 1]


def test_worst_minutes_count_misses_and_never_served_by_arrival_minute() -> None:
    # (arrival, TTFT): the last two never got a first token (infinite TTFT), each counted in its arrival minute.
    served = [(5.0, 0.1), (10.0, 3.0), (61.0, 2.5), (62.0, 2.6), (70.0, 0.2), (130.0, 0.3), (119.0, inf), (125.0, inf)]
    arrivals, ttfts = (np.array(x) for x in zip(*served, strict=True))
    times, ready = [0.0, 30.0, 60.0, 90.0, 120.0, 150.0], [2, 2, 3, 1, 4, 4]
    got = worst_minutes(arrivals, ttfts, np.ones(len(served)), 2.0, (times, ready))
    assert got == [
        MissedMinute(60.0, arrived=4, outside=3, ready=1),  # fewest ready during 60-120 s
        MissedMinute(0.0, arrived=2, outside=1, ready=2),
        MissedMinute(120.0, arrived=2, outside=1, ready=4),
    ]
    assert worst_minutes(arrivals, ttfts, np.ones(len(served)), 2.0, (times, ready), keep=1) == got[:1]
    nothing_late = worst_minutes(np.array([1.0]), np.array([0.5]), np.ones(1), 2.0, (times, ready))
    assert nothing_late == []


def test_worst_minutes_weigh_fluid_points_and_start_where_the_replay_starts() -> None:
    # Fluid level: quantile points standing for fractions of requests; a replay that starts at minute 10.
    arrivals = np.array([600.0, 600.0, 660.0, 660.0])
    ttfts = np.array([0.5, 9.0, 3.0, 4.0])
    weights = np.array([30.0, 10.4, 5.0, 5.0])
    got = worst_minutes(arrivals, ttfts, weights, 2.0, ([600.0, 660.0], [3, 5]))
    assert got == [MissedMinute(600.0, arrived=40, outside=10, ready=3), MissedMinute(660.0, 10, 10, 5)]


def test_a_fluid_replay_says_where_it_missed() -> None:
    trace = "synthetic:duration_s=900,rate=20,amplitude=0,bursts=1,burst_factor=6,burst_s=120"
    r = backtest(trace, BacktestConfig(policies=("reactive",), fidelity="fluid", frontier=False)).policies["reactive"]
    outside = (1 - r.slo_attainment) * r.requests
    assert r.worst_minutes  # the burst found reactive short
    assert sum(m.outside for m in r.worst_minutes) <= outside + len(r.worst_minutes)  # each rounded, never more
