"""The two-pool frontier as a bound: kvpilot per pool and Dynamo's SLA rule (ARIMA and constant predictors), on a
short slice of Mooncake and of Azure code ×4, land at or above the dollars the frontier reaches at their own
attainment (scaler.backtest.disagg's fleet, loop and measure, which bench/disagg.py and `kvpilot backtest --pools`
run); and a schedule below a weakened search is caught."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.trace import load_trace

TOL = 1e-3  # the frontier's interpolation rounding, as in test_backtest_frontier


def _bench() -> Any:
    from scaler.backtest import disagg

    return disagg


# (trace, slice start, length, rate scale): long prompts from the start; code's bursts from nothing at ×4
SLICES = [
    ("mooncake_synthetic_trace.jsonl", 0.0, 300.0, 1.0),
    ("azure2023_code.csv", 660.0, 240.0, 4.0),
]


@pytest.mark.timeout(600)  # several dozen replays of two pools on a loaded 2-core runner
@pytest.mark.parametrize(("name", "start", "duration", "scale"), SLICES)
def test_no_policy_lands_below_the_pool_frontier(
    traces_dir: Path, name: str, start: float, duration: float, scale: float
) -> None:
    d = _bench()
    trace = load_trace(traces_dir / name, rate_scale=scale, start_s=start, duration_s=duration)
    runs = [
        d.run_disaggregated(trace, d.KvpilotPools()),
        d.run_disaggregated(trace, d.DynamoRule("arima")),
        d.run_disaggregated(trace, d.DynamoRule("constant")),
    ]
    front = d.measure_frontier(trace, most_prices=1)
    assert front.runs, "the search verified no pair of schedules"
    below = {}
    for r in runs:
        bound = front.cost_at(r.slo_attainment)
        if bound is None or r.cost_usd < bound * (1 - TOL):
            below[r.name] = (round(r.slo_attainment, 5), round(r.cost_usd, 4), bound)
    assert not below, f"{name}: below the pool frontier (attainment, $, frontier $): {below}"
    # every frontier point is a pair replayed whole through the policies' loop: replaying it again measures the same
    top = front.runs[-1]
    again = d.replay_schedule(trace, top.held["prefill"], top.held["decode"])
    assert (again.slo_attainment, again.cost_usd) == (top.slo_attainment, top.cost_usd)


def _run(prefill: tuple[int, ...], attainment: float, cost_usd: float, decode: tuple[int, ...] = (1, 1)) -> Any:
    from scaler.backtest.pool_frontier import PoolRun

    return PoolRun({"prefill": prefill, "decode": decode}, attainment, cost_usd, {})


# (runs as (prefill schedule, attainment, $), prefill's envelope schedules, most, expected to refine)
REFINE_CASES = [
    # a dearer schedule at the top attainment (Azure code x4: 99.96 % at $18.61 and at $43.83) is passed over
    ([((6,), 0.9996, 18.61), ((16,), 0.9996, 43.83), ((3,), 0.9786, 9.64)], [(16,), (6,), (3,)], 2, [(6,), (3,)]),
    # a lower attainment at a higher cost is dominated too
    ([((6,), 0.99, 10.0), ((8,), 0.98, 12.0), ((2,), 0.90, 7.0)], [(6,), (8,), (2,)], 2, [(6,), (2,)]),
    # the highest attainment first, as many as asked
    ([((6,), 0.99, 10.0), ((4,), 0.97, 9.0), ((2,), 0.90, 7.0)], [(2,), (4,), (6,)], 2, [(6,), (4,)]),
    # a schedule replayed only with another decode schedule is not one of these
    ([((6,), 0.99, 10.0, (2, 2)), ((4,), 0.97, 9.0)], [(6,), (4,)], 2, [(4,)]),
]


@pytest.mark.parametrize(("runs", "prefills", "most", "expected"), REFINE_CASES)
def test_decode_is_refined_under_undominated_prefill_schedules(
    runs: list[tuple[Any, ...]], prefills: list[tuple[int, ...]], most: int, expected: list[tuple[int, ...]]
) -> None:
    from scaler.backtest.pool_frontier import to_refine

    assert to_refine([_run(*r) for r in runs], prefills, (1, 1), most) == expected


def test_one_pool_counts_the_searched_pools_replicas(traces_dir: Path) -> None:
    # The replayer counts a fleet's replicas through replica_count(); for one pool of a disaggregated fleet that is
    # the searched pool's count as its snapshot lists it, whatever the other pool holds.
    from scaler.backtest.pool_frontier import OnePool
    from scaler.backtest.sim import replica_count

    d = _bench()
    trace = load_trace(traces_dir / "azure2023_code.csv", rate_scale=4.0, start_s=660.0, duration_s=240.0)
    for pool, other in (("prefill", [3, 3, 3, 3, 3]), ("decode", [1, 1, 1, 1, 1])):
        one = OnePool(d.make_fleet(trace, 2, 2), pool, other)
        counts = []
        for t, n in [(20.0, 4), (70.0, 1), (130.0, 2)]:
            one.set_replicas(n)
            one.advance_to(t)
            counts.append((replica_count(one), len(one.snapshot().replicas)))
        assert all(a == b for a, b in counts), (pool, counts)
