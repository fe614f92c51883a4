"""bench/kv_ceiling.py: the per-tick features read unknowns as nothing to warn on, and the Pareto front keeps what no
other point dominates (what a monotone rule must warn on before it can warn a point)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

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
