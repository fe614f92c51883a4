"""bench/kv_ceiling.py: the per-tick features read unknowns as nothing to warn on, and the Pareto front keeps what no
other point dominates (what a monotone rule must warn on before it can warn a point)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from collector.samples import ReplicaSample
from detectors import kv_exhaustion
from tests.helpers.bench import load_bench


def _reading(**kw: float | None) -> kv_exhaustion.KvReading:
    base: dict[str, float | None] = {
        "usage": 0.4, "peak_usage": 0.6, "slope_per_s": None, "time_to_exhaustion_s": None,
        "confirm_time_to_exhaustion_s": None, "requests_waiting": None, "requests_running": 10.0,
        "preemptions_rate": 0.0, "in_flight_growth": None, "arrival_rate": 3.0,
    }  # fmt: skip
    base.update(kw)
    return kv_exhaustion.KvReading(**base)  # type: ignore[arg-type]


def test_features_read_unknowns_as_zero() -> None:
    f = load_bench("kv_ceiling").features(_reading(arrival_rate=math.nan))
    assert f == {"rho": 0.0, "rise": 0.0, "peak": 0.6, "usage": 0.4, "waiting": 0.0, "slope": 0.0}


def test_features_take_the_larger_load_and_rise() -> None:
    demand = kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=8.0, horizon_s=60.0)
    r = _reading(arrival_rate=5.0, load=0.4, demand_rise=0.02, arrivals_rise=0.1)
    f = load_bench("kv_ceiling").features(replace(r, demand=demand))
    assert (f["rho"], f["rise"]) == (0.5, 0.1)


def test_pareto_keeps_the_undominated_points() -> None:
    front = load_bench("kv_ceiling")._pareto(np.array([[1.0, 0.0], [0.5, 0.5], [0.4, 0.4], [0.0, 1.0], [1.0, 0.0]]))
    assert sorted(map(tuple, front.tolist())) == [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)]


def _sample(t: float, **kw: float | None) -> ReplicaSample:
    base: dict[str, float | None] = {
        "kv_usage": 0.5, "kv_capacity_tokens": 100_000.0, "requests_running": 20.0, "requests_waiting": 0.0,
        "generation_tokens": 0.0, "prompt_tokens": 0.0, "requests_finished": 0.0,
    }  # fmt: skip
    base.update(kw)
    return ReplicaSample("ns", "d", "r0", "n0", "vllm", None, t, **base)  # type: ignore[arg-type]


def test_sample_features_read_the_counters_a_rate_window_apart() -> None:
    bench = load_bench("kv_ceiling")
    before = _sample(0.0, requests_waiting=2.0)
    # A minute: 10,000 tokens generated and 20,000 prompt tokens admitted, 50 requests finished (200 tokens out
    # each); 20 running and 5 waiting now (arrived: 50 + 25 - 22 = 53, ~377 prompt tokens each), half the pool free.
    now = _sample(
        60.0, generation_tokens=10_000.0, prompt_tokens=20_000.0, requests_finished=50.0, requests_waiting=5.0
    )
    f = bench.sample_features(now, before)
    assert f["decode"] == 10_000 / 50_000
    assert f["fill"] == 30_000 / 50_000
    assert f["wgrowth"] == 3.0
    prompt = 20_000 / 53
    assert math.isclose(f["committed"], (50_000 + 20 * 200 + 5 * (prompt + 200)) / 100_000)


def test_sample_features_full_pool_and_unknowns() -> None:
    bench = load_bench("kv_ceiling")
    full = bench.sample_features(_sample(60.0, kv_usage=1.0, generation_tokens=5.0), _sample(0.0))
    assert full["decode"] == full["fill"] == bench.FILL_CAP
    assert full["committed"] == 0.0  # nothing finished: no output length to run the batch to
    assert bench.sample_features(_sample(60.0), None) == dict.fromkeys(bench.SAMPLE_FEATURES, 0.0)
    assert bench.sample_features(_sample(60.0, kv_capacity_tokens=None), _sample(0.0))["decode"] == 0.0


def test_needs_and_greedy_count_the_quiet_episodes_a_rule_must_warn_too() -> None:
    bench = load_bench("kv_ceiling")
    quiet = [np.array([[0.9, 0.1]]), np.array([[0.5, 0.5]]), np.zeros((0, 2))]
    fronts = bench._fronts(quiet)
    # (0.6, 0.1): only the first quiet episode is as bad on both; (0.95, 0.6): none; (0.1, 0.1): both.
    assert bench._needs(np.array([[0.6, 0.1], [0.1, 0.1]]), fronts) == frozenset({0})
    assert bench._needs(np.array([[0.95, 0.6]]), fronts) == frozenset()
    assert bench._needs(np.zeros((0, 2)), fronts) is None
    needs = [frozenset({0}), frozenset(), frozenset({0, 1}), frozenset({0})]
    assert bench._greedy(needs, 1) == (3, 1)
    assert bench._greedy(needs, 2) == (4, 2)
    assert bench._greedy(needs, 0) == (1, 0)


def _recorded(family: str, first: float | None, usage: float, tokens_a_tick: float) -> object:
    """One replica from 5 s to 400 s (to its first preemption) at a steady ``usage``, its running sequences adding
    ``tokens_a_tick`` generation tokens a tick; no demand, trend or queue (the default warns none of it)."""
    replay = load_bench("kv_replay")
    episodes = load_bench("kv_episodes")
    end = 400.0 if first is None else first
    ticks, readings = [], []
    for i in range(1, int(end / 5) + 1):
        t = 5.0 * i
        sample = _sample(t, kv_usage=usage, generation_tokens=tokens_a_tick * i, requests_finished=float(i))
        ticks.append((t, [sample]))
        readings.append(replay.Reading(t, "r0", _reading(usage=usage, peak_usage=usage)))
    episode = episodes.Episode("trace", family, 1.0, 1, ticks, first, usage, usage)
    return replay.Recorded(episode, readings, None)


def test_causes_class_each_miss_by_what_departs_from_the_quiet_episodes() -> None:
    bench = load_bench("kv_ceiling")
    quiet = [_recorded("plateau", None, 0.5, 10.0) for _ in range(5)]  # budget: 1 quiet episode
    missed = [
        _recorded("ramp", 300.0, 0.8, 10.0),  # fuller than any quiet pool: (iii)
        _recorded("ramp", 300.0, 0.5, 5_000.0),  # as full, decoding 500 times faster: (ii)
        _recorded("ramp", 300.0, 0.4, 10.0),  # below every quiet pool on every signal: (i)
        _recorded("burst", 340.0, 0.9, 10.0),  # 40 s after the burst's rise: sudden
    ]
    lines = bench.causes([*quiet, *missed])
    assert lines[0].startswith("4 preempting, 5 quiet (budget: 1 quiet warned)")
    counts = {line.split("  ", 1)[1]: line.split(" / ")[0] for line in lines[1:6]}
    assert counts == {
        "caught >= 60 s ahead by the default": "0",
        "sudden: the load rose < 70 s before": "1",
        "(i) nothing departs within the budget": "1",
        "(ii) only signals the reading leaves out depart": "1",
        "(iii) a signal the reading has departs": "1",
    }
    assert lines[-1] == "sudden, first preemption after the rise: < 60 s 1"
