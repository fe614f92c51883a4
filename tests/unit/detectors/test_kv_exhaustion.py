"""kv_exhaustion over the real FleetState: warns on the trend before the pool is full, pages once it is."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from collector.state import FleetState
from detectors import kv_exhaustion
from detectors.kv_trend import KvTrends
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, drive, replica


def _run(kv: list[float], **kw: Any) -> FleetState:
    return drive(lambda i, t: ([replica("r0", t, kv_usage=kv[i], **kw)], []), len(kv))


def _detect(kv: list[float], **kw: Any) -> list[Any]:
    state = _run(kv, **kw)
    return kv_exhaustion.detect(state, thresholds=DEFAULT, now=(len(kv) - 1) * TICK_S)


CASES = [
    # usage climbing 1 %/s to 78 %: projected full in ~20 s -> warning, before any preemption
    ([0.60, 0.65, 0.70, 0.75, 0.78], {}, "warning"),
    # near full with requests queueing -> critical
    ([0.92] * 5, {"requests_waiting": 3.0}, "critical"),
    # no preemption counter (unknown, not zero), flat, nobody waiting -> nothing
    ([0.85] * 5, {"preemptions": None}, None),
    # high but flat, nobody waiting: a well-packed pool, not a problem
    ([0.88] * 5, {}, None),
    # climbing but from a cold pool: no projection below project_from_usage
    ([0.10, 0.15, 0.20, 0.25, 0.30], {}, None),
    # draining: time to exhaustion is None
    ([0.95, 0.90, 0.85, 0.80, 0.75], {}, None),
    # slowly climbing: projected full in (0.98-0.80)/0.0005 = 360 s, beyond the 300 s warning horizon
    ([0.79, 0.7925, 0.795, 0.7975, 0.80], {}, None),
    # engine without a KV gauge: silent
    ([None] * 5, {}, None),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("kv", "kw", "severity"), CASES)
def test_kv_cases(kv, kw, severity):
    found = _detect(kv, **kw)
    assert [str(f.severity) for f in found] == ([severity] if severity else [])


def test_preempting_replica_is_critical_and_says_both_numbers():
    # The preemption counter rising while the pool was full within the window is the symptom itself: critical, and
    # the text gives the measured rate and the usage that opened it, even once the pool has drained a little.
    kv = [0.97, 1.0, 0.99, 0.95, 0.85]
    state = drive(lambda i, t: ([replica("r0", t, kv_usage=kv[i], preemptions=float(i), requests_waiting=7.0)], []), 5)
    (f,) = kv_exhaustion.detect(state, thresholds=DEFAULT, now=20)
    assert str(f.severity) == "critical"
    assert f.summary == "r0: preempting 0.2 requests/s: KV cache 100% full within the last minute (now 85%), 7 waiting"
    assert f.evidence["preemptions_rate"] == pytest.approx(0.2)


@pytest.mark.parametrize("usage", [0.01, 0.0, 0.5])
def test_a_preemption_counter_moving_on_a_pool_far_from_full_never_pages(usage):
    # Issue 13: "KV cache 1% full, preempting requests" was a critical. vLLM preempts only when no block is free,
    # so a counter that moves while the pool sat far from full (a reset misread, a series that is not this
    # replica's) is no preemption: nothing opens, and certainly no critical.
    state = drive(lambda i, t: ([replica("r0", t, kv_usage=usage, preemptions=float(i))], []), 5)
    assert kv_exhaustion.detect(state, thresholds=DEFAULT, now=20) == []


@pytest.mark.parametrize("usage", [1.8, 2.0, -0.3, float("nan"), float("inf")])
def test_impossible_usage_is_unknown_never_critical(usage):
    # A doubled gauge (two series summed: 0.9 + 0.9) or a broken exporter: unknown, never "100 % full".
    state = drive(lambda i, t: ([replica("r0", t, kv_usage=usage, requests_waiting=30.0, preemptions=float(i))], []), 5)
    assert kv_exhaustion.detect(state, thresholds=DEFAULT, now=20) == []


def _flow(kv: list[float], arrivals_per_tick: float, finished_per_tick: float, **kw: Any) -> list[Any]:
    # requests_finished counts up by finished_per_tick; in-flight grows by the difference each tick.
    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        running = 40.0 + i * (arrivals_per_tick - finished_per_tick)
        fields = {"kv_usage": kv[i], "requests_running": running, "requests_finished": i * finished_per_tick, **kw}
        return [replica("r0", t, **fields)], []

    state = drive(tick, len(kv))
    return kv_exhaustion.detect(state, thresholds=DEFAULT, now=(len(kv) - 1) * TICK_S)


RISING = [0.60 + 0.01 * i for i in range(13)]  # 0.2 %/s, reaching 0.72: projected full in ~130 s


def test_a_pool_still_filling_warns_with_its_projection():
    # Arrivals outrun completions (5 more requests in flight per tick): the projection stands.
    (f,) = _flow(RISING, arrivals_per_tick=15.0, finished_per_tick=10.0)
    assert str(f.severity) == "warning"
    assert f.summary.startswith("r0: KV cache 72% full and filling at 12%/min: exhausted in ~")
    assert f.summary.endswith("no preemptions measured yet")
    assert f.evidence["in_flight_growth"] == pytest.approx(1.0)


def test_a_pool_whose_flow_balances_is_levelling_off_not_warned():
    # The same usage trend, but requests finish as fast as they arrive: the ramp is over, the pool levels off.
    assert _flow(RISING, arrivals_per_tick=10.0, finished_per_tick=10.0) == []


def test_a_queue_for_blocks_counts_as_filling_even_when_the_flow_balances():
    # Requests waiting for blocks: admission is what holds them back, the pool is not levelling off by choice.
    found = _flow(RISING, arrivals_per_tick=10.0, finished_per_tick=10.0, requests_waiting=3.0)
    assert [str(f.severity) for f in found] == ["warning"]


def test_time_to_exhaustion_is_projected_from_the_slope():
    # 1 %/s from 0.80: (0.98 - 0.80) / 0.01 = 18 s.
    state = _run([0.76, 0.77, 0.78, 0.79, 0.80])  # 5 s ticks: 0.2 %/s
    tte = kv_exhaustion.time_to_exhaustion_s(state.replica_history("ml/r0"), DEFAULT.kv)
    assert tte == pytest.approx((0.98 - 0.80) / 0.002)
    state = _run([0.99] * 3)
    assert kv_exhaustion.time_to_exhaustion_s(state.replica_history("ml/r0"), DEFAULT.kv) == 0.0


def test_stale_replica_is_left_to_target_down():
    # A replica not scraped for longer than stale_after_s is not judged on its old KV value.
    state = FleetState(stale_after_s=10)
    state.observe([replica("r0", 0, kv_usage=0.99, requests_waiting=5.0)], [], now=0)
    state.observe([], [], now=60)
    assert kv_exhaustion.detect(state, thresholds=DEFAULT, now=60) == []


def test_one_noisy_scrape_does_not_set_the_trend():
    # A single spike at the end of a flat 60 % series barely moves the fitted level: no projection fires.
    state = _run([0.6] * 17 + [0.95])
    tte = kv_exhaustion.time_to_exhaustion_s(state.replica_history("ml/r0"), DEFAULT.kv)
    assert tte is None or tte > DEFAULT.kv.warn_time_to_exhaustion_s


# The planner's load rule, off by default since the Little's-law projection replaced it, as an operator can turn it on.
LOAD_RULE = dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, demand_load=0.8))


def _demand_case(capacity: float | None, forecast: float | None, kv: float = 0.6) -> list[Any]:
    state = _run([kv] * 5)  # flat: no trend to project, nothing waiting
    demand = {"ml/chat": kv_exhaustion.Demand(capacity_rps=capacity, forecast_rps=forecast, horizon_s=155.0)}
    return kv_exhaustion.detect(state, thresholds=LOAD_RULE, now=20, demand=demand)


def test_demand_forecast_near_capacity_warns_a_pool_that_feels_it_and_says_both() -> None:
    # One ready replica serving 10 requests/s, 9 forecast at the horizon: 90 % of capacity, above demand_load.
    (f,) = _demand_case(10.0, 9.0)
    assert str(f.severity) == "warning"
    assert f.summary == (
        "r0: KV cache 60% full (60% within the last minute); demand 9 requests/s forecast in 155 s, 90% of what the "
        "ready replicas serve: no exhaustion projected by the usage trend yet; no preemptions measured yet"
    )
    assert f.evidence["demand_load"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("capacity", "forecast", "kv"),
    [
        (10.0, 5.0, 0.6),  # demand well inside capacity: a flat pool is fine
        (10.0, 9.0, 0.3),  # demand near capacity but the pool has not felt it (peak below demand_min_usage)
        (None, 9.0, 0.6),  # capacity unknown: the engine alone decides (flat: nothing)
        (float("nan"), 9.0, 0.6),
        (10.0, float("nan"), 0.6),
        (0.0, 9.0, 0.6),  # a zero capacity is unknown, not infinite load
    ],
)
def test_demand_alone_does_not_warn_when_inside_capacity_or_unknown(capacity, forecast, kv) -> None:
    assert _demand_case(capacity, forecast, kv) == []


def test_detection_passes_the_loops_demand_to_kv_exhaustion() -> None:
    from detectors.registry import Detection

    state = drive(lambda i, t: ([replica("r0", t, kv_usage=0.6, requests_finished=4.0 * t)], []), 5)
    det = Detection(only=["kv_exhaustion"])
    assert det.tick(state, now=20).active == []
    det.set_demand({"ml/chat": kv_exhaustion.Demand(capacity_rps=10.0, forecast_rps=12.0, horizon_s=155.0)})
    det.tick(state, now=20)
    assert [f.kind for f in det.tick(state, now=20).active] == ["kv_exhaustion"]  # opens after 2 ticks


def test_a_trend_asked_again_for_another_history_is_worked_out_again() -> None:
    # KvTrends remembers the trend of a replica's latest history; a different history ending in the same sample
    # (shorter, or another list) must not get the remembered answer.
    from dataclasses import replace as with_

    from collector.samples import ReplicaSample

    base = ReplicaSample(namespace="ns", deployment="d", replica="r", node="n", engine="vllm", model="m", timestamp=0)
    rising = [with_(base, timestamp=5.0 * i, kv_usage=0.3 + 0.02 * i) for i in range(20)]
    flat_then_latest = [with_(s, kv_usage=0.5) for s in rising[:-1]] + [rising[-1]]
    trends = KvTrends()
    first = kv_exhaustion.kv_trend(rising, DEFAULT.kv, trends=trends)
    assert first is not None
    assert first[0] > 0
    assert kv_exhaustion.kv_trend(rising, DEFAULT.kv, trends=trends) == first
    other = kv_exhaustion.kv_trend(flat_then_latest, DEFAULT.kv, trends=trends)
    assert other is not None
    assert other[0] == pytest.approx(0.0)
    assert kv_exhaustion.kv_trend(rising[-2:], DEFAULT.kv, trends=trends) is None  # too few points


def test_projected_usage_follows_littles_law_with_the_batch_slowdown() -> None:
    # Same arrivals: same usage. Doubling them from 40 % to 80 % of the saturation rate: twice the rate, three
    # times the time in system ((1 - 0.4) / (1 - 0.8)), six times the sequences and the KV they hold.
    assert kv_exhaustion.projected_usage(0.5, 4.0, 4.0, 10.0) == pytest.approx(0.5)
    assert kv_exhaustion.projected_usage(0.1, 4.0, 8.0, 10.0) == pytest.approx(0.6)
    assert kv_exhaustion.projected_usage(0.5, 4.0, 2.0, 10.0) == pytest.approx(0.5 * (2 / 0.8) / (4 / 0.6))
    assert kv_exhaustion.projected_usage(0.3, 4.0, 10.0, 10.0) == float("inf")  # at saturation: unbounded
    assert kv_exhaustion.projected_usage(0.3, 0.0, 5.0, 10.0) is None  # nothing measured to scale from


# The Little's-law rule in place of the load rule (an option: `detectors.kv.projected_usage`).
LITTLE = dataclasses.replace(DEFAULT, kv=dataclasses.replace(DEFAULT.kv, projected_usage=0.6, demand_load=None))


def _little_case(forecast: float, kv: float = 0.6, capacity: float = 10.0) -> list[Any]:
    # One replica finishing (and receiving) 4 requests/s at a flat usage: no trend, nobody waiting.
    state = drive(lambda i, t: ([replica("r0", t, kv_usage=kv, requests_finished=4.0 * t)], []), 5)
    demand = {"ml/chat": kv_exhaustion.Demand(capacity_rps=capacity, forecast_rps=forecast, horizon_s=155.0)}
    return kv_exhaustion.detect(state, thresholds=LITTLE, now=20, demand=demand)


def test_littles_law_warns_when_the_forecast_would_fill_the_pool_and_says_both() -> None:
    # 60 % at 4 requests/s of 10; 6 forecast: 0.6 x (6 / 0.4) / (4 / 0.6) = 135 % of the pool. A warning (no
    # preemption, nobody waiting), saying the projection, the demand and that nothing was preempted yet.
    (f,) = _little_case(6.0)
    assert str(f.severity) == "warning"
    assert f.evidence["projected_usage"] == pytest.approx(1.35)
    assert "~135% of the pool held at the forecast (Little's law)" in f.summary
    assert "demand 6 requests/s forecast in 155 s" in f.summary
    assert f.summary.endswith("no exhaustion projected by the usage trend yet; no preemptions measured yet")
    (sat,) = _little_case(12.0)
    assert "grow without bound" in sat.summary


@pytest.mark.parametrize(
    ("forecast", "kv"),
    [
        (4.0, 0.5),  # the arrivals hold steady: the pool stays where it is
        (4.5, 0.4),  # 0.4 x (4.5 / 0.55) / (4 / 0.6) = 49 %: fits
        (9.0, 0.2),  # would overflow, but the pool has not felt the load yet (below projected_min_usage)
    ],
)
def test_littles_law_is_silent_when_the_forecast_fits(forecast: float, kv: float) -> None:
    assert _little_case(forecast, kv) == []


def test_arrival_spread_measures_burstiness_from_the_counters() -> None:
    from dataclasses import replace as with_

    from collector.samples import ReplicaSample

    base = ReplicaSample(
        namespace="ns", deployment="d", replica="r", node="n", engine="vllm", model="m", timestamp=0,
        requests_running=0.0, requests_waiting=0.0,
    )  # fmt: skip
    steady = [with_(base, timestamp=5.0 * i, requests_finished=20.0 * i) for i in range(30)]  # 4 requests/s
    assert kv_exhaustion.arrival_spread(steady, 60.0, 60.0) == pytest.approx(0.0)
    # A minute at 8 requests/s, a minute at nothing, in turn: the 60 s rate swings between 0 and 8.
    bursty, total = [], 0.0
    for i in range(30):
        total += 40.0 if (i // 12) % 2 == 0 else 0.0
        bursty.append(with_(base, timestamp=5.0 * i, requests_finished=total))
    spread = kv_exhaustion.arrival_spread(bursty, 60.0, 60.0)
    assert spread is not None
    assert spread > 1.0
    assert kv_exhaustion.arrival_spread([with_(s, requests_finished=None) for s in steady], 60.0, 60.0) is None
    assert kv_exhaustion.arrival_spread(steady[:13], 60.0, 60.0) is None  # one 60 s rate: too few to spread


def _filling_with_demand(
    capacity: float,
    forecast: float,
    rise_per_min: float | None = None,
    arrivals_step: float = 0.0,
    **kw: Any,
) -> list[Any]:
    # Two minutes of a pool rising 0.4 %/s to 52 % (projected full in ~115 s by both trends) on one replica whose
    # flow still grows (one more request in flight per 5 s tick): 15 requests arrive in the first tick, each tick
    # ``arrivals_step`` more. The planner's numbers: what one replica serves and the forecast (one ready replica).
    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        arrived = sum(15.0 + arrivals_step * k for k in range(i + 1))
        fields = {"kv_usage": 0.04 + 0.02 * i, "requests_running": 40.0 + i, "requests_finished": arrived - i, **kw}
        return [replica("r0", t, **fields)], []

    state = drive(tick, 25)
    slope = None if rise_per_min is None else rise_per_min / 60.0  # replicas' worth per second
    demand = {
        "ml/chat": kv_exhaustion.Demand(
            capacity_rps=capacity, forecast_rps=forecast, horizon_s=155.0, replicas_slope_per_s=slope
        )
    }
    return kv_exhaustion.detect(state, thresholds=DEFAULT, now=24 * TICK_S, demand=demand)


def test_a_pool_rising_with_arrivals_its_replica_serves_is_reaching_its_level_not_warned() -> None:
    # Issue 16's demo: pools rising from 20 % to 50 % in a minute at 30-45 % of what the replicas serve warned
    # "exhausted in ~129 s" and closed 30 s later, before any fault. Here: 3 requests/s of 10 arriving, flat, and
    # 3.3 forecast. By Little's law the sequences in flight, and the KV they hold, follow the arrivals: at ~33 %
    # of what the replica serves the pool levels off near 60 %, whatever the straight line says.
    assert _filling_with_demand(capacity=10.0, forecast=3.3, rise_per_min=0.0) == []
    assert _filling_with_demand(capacity=10.0, forecast=3.3) == []  # the demand's trend unknown: its load alone


@pytest.mark.parametrize(
    ("capacity", "forecast", "kw"),
    [
        (10.0, 3.3, {"rise_per_min": 0.3}),  # the demand rising 0.3 a minute: ~90 % by the projected exhaustion
        (10.0, 3.3, {"arrivals_step": 0.5}),  # the replica's own arrivals rising 0.12 a minute, the forecast not
        (10.0, 3.3, {"requests_waiting": 2.0}),  # a queue: the replica is not serving what arrives
        (float("nan"), 3.3, {}),  # what a replica serves unknown: the trend alone decides, as without the planner
    ],
)
def test_a_pool_filling_toward_what_its_replica_serves_still_warns(
    capacity: float, forecast: float, kw: dict[str, Any]
) -> None:
    (f,) = _filling_with_demand(capacity, forecast, **kw)
    assert str(f.severity) == "warning"
    assert f.summary.startswith("r0: KV cache 52% full and filling at 24%/min: exhausted in ~115 s")
