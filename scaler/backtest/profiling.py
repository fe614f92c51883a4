"""Measure, on the simulator, the requests/s one replica serves within the TTFT SLO for this trace's mix.

This is the profiling step Dynamo's planner runs before deployment (its `profile_sla`), done once per backtest
and handed to every policy that needs a capacity (kvpilot, dynamo, oracle), so none of them gets a better
number than another. Capacity = the highest stationary Poisson rate at which the SLO attainment stays ≥ 99 % of
what an idle replica achieves (some prompts — Mooncake's 60k-token ones — miss a 2 s TTFT even alone, and no
number of replicas changes that), found by bisection; requests are drawn from the trace itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scaler.backtest.sim import make_fleet, stationary_trace

TARGET_ATTAINMENT = 0.99
PROFILE_S = 600.0
WARMUP_S = 60.0


IDLE_REQUESTS = 400


def attainment_at(trace: Any, rate: float, slo_s: float, *, seed: int, duration_s: float = PROFILE_S) -> float:
    stream = stationary_trace(trace, rate=rate, duration_s=duration_s, seed=seed)
    fleet = make_fleet(stream, replicas=1, cold_start_s=0.0, fidelity="request", seed=seed, routing="least_loaded")
    fleet.advance_to(duration_s + 4 * slo_s)
    done = [f for f in fleet.finished() if WARMUP_S <= f.arrival_s < duration_s]
    arrived = int(np.count_nonzero((stream.columns.arrival_s >= WARMUP_S) & (stream.columns.arrival_s < duration_s)))
    if arrived == 0:
        return 1.0
    return sum(1 for f in done if f.ttft_s <= slo_s) / arrived


def replica_capacity_rps(trace: Any, slo_s: float, *, seed: int = 0, iterations: int = 12) -> tuple[float, float]:
    """(capacity req/s, SLO attainment of an idle replica): bisection on the rate between 0 and the first
    rate that fails."""
    # Idle: requests 20 s apart, so none waits for another.
    idle = attainment_at(trace, 0.05, slo_s, seed=seed, duration_s=IDLE_REQUESTS / 0.05)
    target = TARGET_ATTAINMENT * idle
    lo, hi = 0.0, 1.0
    while attainment_at(trace, hi, slo_s, seed=seed) >= target:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            return lo, idle
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if attainment_at(trace, mid, slo_s, seed=seed) >= target:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise ValueError(
            f"one replica cannot serve even {hi:.3g} req/s of this trace within a {slo_s} s TTFT SLO; "
            "the SLO is unattainable for this replica profile"
        )
    return lo, idle
