"""The burst floor: the short-window arrival peak (scaler.burst), the policy stage it feeds, and the planner wiring."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState
from scaler.burst import BurstPeak, burst_need
from scaler.capacity import CapacityConfig, TokenMix
from scaler.planner import Planner, PlannerConfig, planner_config
from scaler.policy import Demand, PolicyConfig, ReplicaPolicy

TICK_S = 5.0
MIX = TokenMix(1000.0, 200.0)


def _steps(peak: BurstPeak, per_tick: list[float], replicas: int = 2) -> list[float | None]:
    """Feed arrivals per tick split over ``replicas`` (all finished by the next tick); the peak after each."""
    finished, out = 0.0, []
    for i, n in enumerate(per_tick):
        finished += n
        out.append(peak.update(i * TICK_S, [(f"r{k}", finished / replicas, 0.0) for k in range(replicas)]))
    return out


def test_peak_is_the_window_rate_and_is_held_then_forgotten() -> None:
    # 30 s window, 60 s memory: 6 ticks of 20 arrivals (4 req/s) between silences; the rate needs a whole window.
    peak = BurstPeak(window_s=30.0, hold_s=60.0)
    per_tick = [0.0] * 7 + [20.0] * 6 + [0.0] * 20
    got = _steps(peak, per_tick)
    assert got[5] is None  # not yet one whole window seen
    assert got[6] == 0.0
    assert got[12] == pytest.approx(4.0)  # the burst filled the window
    assert got[12 + 12] == pytest.approx(4.0)  # held for hold_s after the window that saw it
    assert got[-1] == pytest.approx(0.0)  # forgotten after that


@pytest.mark.parametrize(
    ("ticks", "arrivals"),
    [
        # a replica that joins after the first tick brings everything it holds (it joined empty)
        ([[("a", 10.0, 0.0)], [("a", 10.0, 0.0), ("b", 3.0, 2.0)]], 5.0),
        # a finished counter that went down is a restarted engine: its new counts are all new arrivals
        ([[("a", 100.0, 1.0)], [("a", 4.0, 1.0)]], 5.0),
        # a replica gone leaves no negative step: its in-flight requests did not un-arrive
        ([[("a", 10.0, 0.0), ("b", 10.0, 8.0)], [("a", 12.0, 1.0)]], 3.0),
        # requests still queued count when they arrive, not when they finish
        ([[("a", 0.0, 0.0)], [("a", 0.0, 7.0)]], 7.0),
    ],
)
def test_arrivals_per_tick_from_engine_counters(ticks: list[list[tuple[str, float, float]]], arrivals: float) -> None:
    peak = BurstPeak(window_s=TICK_S, hold_s=0.0)
    for i, tick in enumerate(ticks):
        rate = peak.update(i * TICK_S, tick)
    assert rate == pytest.approx(arrivals / TICK_S)


def test_the_gateways_counter_wins_and_losing_it_counts_nothing_twice() -> None:
    # Replicas whose counters are shares of a fleet total (as a fluid simulator renders them) jump when the fleet
    # changes; the gateway's counter does not. Without a previous gateway count, or once it is gone again, the
    # engines' counters step from their own last tick (never counted in full for a replica seen all along).
    peak = BurstPeak(window_s=TICK_S, hold_s=0.0)
    peak.update(0.0, [("a", 100.0, 0.0)], gateway_total=1000.0)
    assert peak.update(5.0, [("a", 50.0, 0.0), ("b", 50.0, 0.0)], gateway_total=1010.0) == pytest.approx(2.0)
    assert peak.update(10.0, [("a", 55.0, 0.0), ("b", 55.0, 0.0)]) == pytest.approx(2.0)
    assert peak.update(15.0, [("a", 60.0, 0.0), ("b", 60.0, 0.0)], gateway_total=2000.0) == pytest.approx(2.0)
    assert peak.update(20.0, [("a", 60.0, 0.0), ("b", 60.0, 0.0)], gateway_total=2025.0) == pytest.approx(5.0)


def test_burst_need_is_the_rate_whose_queue_at_the_bursts_end_waits_the_slo() -> None:
    rate, burst_s, slo_s = 30.0, 30.0, 2.0
    c = burst_need(rate, burst_s, slo_s)
    assert burst_s * (rate - c) / c == pytest.approx(slo_s)
    assert burst_need(rate, burst_s, 0.0) == rate


def _demand(**kw: float | int | None) -> Demand:
    base: dict[str, float | int | None] = {
        "current_replicas": 4,
        "ready_replicas": 4,
        "capacity_rps": 10.0,
        "arrival_rate": 0.0,
        "forecast_upper_rate": 8.0,  # the silence: one replica at 0.8
        "forecast_rate": 8.0,
        "requests_waiting": 0.0,
        "burst_rate": 35.0,  # the last burst needed 4 replicas at full capacity
    }
    base.update(kw)
    return Demand(**base)  # type: ignore[arg-type]


FLOOR = PolicyConfig(target_utilisation=0.8, burst_floor=True)


@pytest.mark.parametrize(
    ("config", "demand", "desired", "reason"),
    [
        # the forecast falls in the silence; the floor keeps what the burst needed, and says so
        (FLOOR, _demand(), 4, "within_tolerance"),
        (FLOOR, _demand(current_replicas=2, ready_replicas=2), 4, "burst_floor"),
        # off (the default), the same silence gives the replicas up
        (PolicyConfig(target_utilisation=0.8), _demand(current_replicas=2, ready_replicas=2), 1, "predictive"),
        # a stuck replica serves nothing: the burst's replicas come on top of it
        (FLOOR, _demand(current_replicas=2, ready_replicas=2, stuck_replicas=1), 5, "burst_floor"),
        # under the forecast's need the floor does not bind
        (FLOOR, _demand(forecast_upper_rate=60.0, forecast_rate=60.0), 8, "predictive"),
        # no peak measured yet: no floor
        (FLOOR, _demand(current_replicas=2, ready_replicas=2, burst_rate=None), 1, "predictive"),
    ],
)
def test_burst_floor_stage(config: PolicyConfig, demand: Demand, desired: int, reason: str) -> None:
    rec = ReplicaPolicy(config).recommend(demand, now=0.0)
    assert (rec.desired_replicas, rec.reason) == (desired, reason)


def test_burst_floor_binds_before_stabilisation_and_the_bounds() -> None:
    config = PolicyConfig(target_utilisation=0.8, burst_floor=True, max_replicas=3)
    rec = ReplicaPolicy(config).recommend(_demand(current_replicas=2, ready_replicas=2), now=0.0)
    assert (rec.desired_replicas, rec.reason, rec.burst_floor_replicas) == (3, "clamped_max", 4)


def _samples(t: float, finished: float, replicas: int) -> list[ReplicaSample]:
    return [
        ReplicaSample(
            namespace="prod",
            deployment="llm",
            replica=f"llm-{i}",
            node="n1",
            engine="vllm",
            model="m",
            timestamp=t,
            requests_waiting=0.0,
            requests_running=0.0,
            requests_finished=finished / replicas,
            prompt_tokens=finished / replicas * MIX.prompt_tokens,
            generation_tokens=finished / replicas * MIX.output_tokens,
        )
        for i in range(replicas)
    ]


def _config(**overrides: Any) -> PlannerConfig:
    """The planner these tests drive: 120 s cold start, 10 req/s a replica at the reference mix, the floor on."""
    fields: dict[str, Any] = {
        "cold_start_s": 120.0,
        "tick_s": TICK_S,
        "min_replicas": 1,
        "max_replicas": None,
        "capacity": CapacityConfig(requests_per_s=10.0, reference_mix=MIX),
        "burst_floor": True,
    }
    return planner_config(**(fields | overrides))


def _on_off(burst_floor: bool) -> list[tuple[int, float | None]]:
    """Bursts of 30 s at 80 req/s every 600 s (capacity 10 req/s a replica), fed through a real FleetState, sized
    for the point forecast (no upper band, to isolate the floor); every decision after the warm-up. Three replicas
    serve and report throughout; the count the planner is told (the scale subresource's) is its last decision.
    Each decision's replicas and what the floor asked."""
    config = _config(forecaster="last_value", burst_floor=burst_floor)
    state, planner = FleetState(rate_window_s=60.0), Planner(dataclasses.replace(config, upper_weight=0.0))
    finished, replicas, out = 0.0, 3, []
    for i in range(int(2400 / TICK_S)):
        t = i * TICK_S
        finished += 80.0 * TICK_S if 300.0 <= t % 600.0 < 330.0 else 0.0
        state.observe(_samples(t, finished, 3), [], now=t)
        (d,) = planner.decide(state, t, current_replicas={"prod/llm": replicas})
        replicas = d.desired_replicas
        if t >= 600.0:
            out.append((d.desired_replicas, d.forecast.get("burst_floor_replicas")))
    return out


def test_a_burst_is_sized_whole_and_its_replicas_held_through_the_silence() -> None:
    # The 60 s rate reads a 30 s burst at 80 req/s as 40 at most (5 replicas at 0.8); the floor reads it whole:
    # 80 · 30 / 32 = 75 req/s, 8 replicas at full capacity, held through the silence until the next burst.
    with_floor = _on_off(burst_floor=True)
    without = _on_off(burst_floor=False)
    assert {r for r, _ in with_floor} == {8}
    assert max(f or 0.0 for _, f in with_floor) == 8.0
    assert (min(r for r, _ in without), max(r for r, _ in without)) == (1, 5)
    assert {f for _, f in without} == {None}  # off: nothing asked, nothing reported


def _smooth_with_a_clump(silence: bool, late: bool, clump_t: float) -> list[tuple[int, float | None]]:
    """One replica serving 6 req/s (10 a replica) through a real FleetState, its queue times read, with a clump of
    150 requests in the tick at ``clump_t``: the minute's rate reads 8.5 req/s at most (two replicas at 0.8), the
    clump's service need (150 + 30) / (5 + 2) = 25.7 req/s, three replicas at full capacity. ``silence``: nothing
    arrives and nothing is in flight for 70 s from 200 s (on/off traffic); ``late``: every request queued past a
    quarter of the SLO from 200 s, none before. Each decision's replicas and what the floor asked, from the clump on."""
    config = _config(forecaster="last_value", slo_ttft_s=2.0)
    state, planner = FleetState(rate_window_s=60.0), Planner(dataclasses.replace(config, upper_weight=0.0))
    finished, queued_late, replicas, out = 0.0, 0.0, 1, []
    for i in range(int((clump_t + 200.0) / TICK_S)):
        t = i * TICK_S
        quiet = silence and 200.0 <= t < 270.0
        served = 0.0 if quiet else 6.0 * TICK_S + (150.0 if t == clump_t else 0.0)
        finished += served
        queued_late += served if late and t >= 200.0 else 0.0
        queued = Histogram(
            bounds=(0.5, 1.0, math.inf),
            counts=(finished - queued_late, finished - queued_late, finished),
            sum=0.0,
            count=finished,
        )
        state.observe([dataclasses.replace(x, queue_time=queued) for x in _samples(t, finished, 1)], [], now=t)
        (d,) = planner.decide(state, t, current_replicas={"prod/llm": replicas})
        replicas = d.desired_replicas
        if t >= clump_t:
            out.append((d.desired_replicas, d.forecast.get("burst_floor_replicas")))
    return out


@pytest.mark.parametrize(
    ("silence", "late", "clump_t", "held"),
    [
        (False, False, 1500.0, False),
        (True, False, 1500.0, True),
        (False, True, 1500.0, True),
        (False, False, 400.0, True),
    ],
)
def test_the_floor_holds_until_the_load_is_measured_smooth(
    silence: bool, late: bool, clump_t: float, held: bool
) -> None:
    # The floor is for on/off traffic, whose minute-scale forecast falls in every silence. Once the release is
    # measured (100 rises of the load and a whole window of SLO readings within target, by 1,500 s here) on a load
    # that never went idle and was never late, the forecast and the queue carry a clump the minute's rate spreads
    # (two replicas at 0.8, not the floor's three). Before that (a clump at 400 s), after a silence, or once a
    # reading was late, the floor holds.
    out = _smooth_with_a_clump(silence, late, clump_t)
    if held:  # three at the profile's capacity; more after late readings, which cut the capacity planned with
        assert all(f is not None and r == f >= 3 for r, f in out)
    else:
        assert {f for _, f in out} == {None}
        assert max(r for r, _ in out) == 2


def test_planner_config_derives_the_floors_window_and_memory() -> None:
    config = planner_config(
        cold_start_s=120.0, tick_s=5.0, min_replicas=1, max_replicas=None, capacity=CapacityConfig(), burst_floor=True
    )
    # half the 60 s rate window; the 300 s scale-down window plus the cold start
    assert (config.policy.burst_floor, config.burst_window_s, config.burst_hold_s) == (True, 30.0, 420.0)
    slow = planner_config(cold_start_s=60.0, tick_s=30.0, min_replicas=1, max_replicas=None, capacity=CapacityConfig())
    # on by default in the planner `kvpilot run` builds (the policy alone keeps it off)
    assert (slow.policy.burst_floor, slow.burst_window_s, slow.burst_hold_s) == (True, 60.0, 360.0)
    assert PlannerConfig().policy.burst_floor is False
    off = planner_config(
        cold_start_s=60.0, tick_s=30.0, min_replicas=1, max_replicas=None, capacity=CapacityConfig(), burst_floor=False
    )
    assert off.policy.burst_floor is False


def test_the_floor_holds_a_short_clumps_service_need_not_its_30_s_rate() -> None:
    # 300 requests in one 5 s tick, then silence: the 30 s rate reads 10 req/s (1 replica at 10 a replica), the
    # service need 300 / (5 + 2) = 42.9 req/s (5 replicas at full capacity), held through the silence. The engines
    # served 100 requests in the first 20 s and then nothing: on/off traffic, where the floor holds.
    config = _config()
    state, planner = FleetState(rate_window_s=60.0), Planner(config)
    floors = []
    for i in range(60):
        t = i * TICK_S
        state.observe(_samples(t, min(100.0, 25.0 * i), 1), [], now=t)
        (d,) = planner.decide(state, t, arrivals_totals={"prod/llm": 300.0 if i >= 40 else 0.0})
        floors.append(d.forecast.get("burst_floor_replicas"))
    assert (floors[40], floors[-1]) == (5.0, 5.0)


def test_settings_turn_the_floor_on_for_kvpilot_run() -> None:
    from kvpilot.runtime.wiring import planner_config as run_config
    from kvpilot.settings import Settings

    settings = Settings.model_validate({"scaler": {"planner": {"burst_floor": True}}})
    assert run_config(settings, settings.scaler.default).policy.burst_floor is True


def test_the_planner_takes_the_gateways_count_for_the_floor() -> None:
    # Engines report nothing new after their first 20 s (a silence: the floor holds on on/off traffic); the gateway
    # counts 90 requests per 5 s tick (18 req/s): the floor reads it, 18 · 30 / 32 = 16.9 req/s, 2 replicas at 10 a
    # replica (what `kvpilot backtest` passes from its router).
    config = _config()
    state, planner = FleetState(rate_window_s=60.0), Planner(config)
    for i in range(20):
        t = i * TICK_S
        state.observe(_samples(t, min(100.0, 25.0 * i), 1), [], now=t)
        (d,) = planner.decide(state, t, arrivals_totals={"prod/llm": 90.0 * i})
    assert d.forecast["burst_floor_replicas"] == 2.0
