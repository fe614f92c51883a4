"""A release the next burst proved wrong (scaler.regret), the arrivals' service need it is judged on (scaler.burst)
and the policy stage the floor feeds."""

from __future__ import annotations

import pytest

from scaler.burst import BurstPeak
from scaler.planner import Planner, PlannerConfig, _DeploymentPlanner
from scaler.policy import Demand, PolicyConfig, ReplicaPolicy
from scaler.regret import ReleaseRegret

TICK_S = 5.0


def test_a_release_met_by_a_burst_it_cannot_serve_holds_the_count_it_released_from() -> None:
    regret = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    regret.released(100.0, before=3, after=2)
    assert regret.judge(200.0, current=2, need=2.4, missed=True) == 3
    assert regret.floor(200.0 + 3599.0) == 3
    assert regret.floor(200.0 + 3600.0) is None  # held for hold_s, then released again
    assert regret.regrets == 1


@pytest.mark.parametrize(
    ("at", "current", "need", "missed"),
    [
        (200.0, 2, 2.4, False),  # the SLO held: nothing wrong
        (200.0, 2, 1.9, True),  # the burst needed no more than the count released to: not the release's miss
        (200.0, 3, 2.4, True),  # the fleet grew since: it is not the fleet that was released
        (200.0, 2, None, True),  # the arrivals' need unknown
        (521.0, 2, 2.4, True),  # the release is older than recent_s: a released replica could have been back
    ],
)
def test_misses_a_release_did_not_cause_hold_nothing(at: float, current: int, need: float | None, missed: bool) -> None:
    regret = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    regret.released(100.0, before=3, after=2)
    assert regret.judge(at, current=current, need=need, missed=missed) is None


def test_a_scale_up_is_not_a_release_and_a_later_regret_keeps_the_higher_floor() -> None:
    regret = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    regret.released(0.0, before=2, after=4)  # up: nothing recorded
    assert regret.judge(10.0, current=4, need=9.0, missed=True) is None
    regret.released(20.0, before=5, after=4)
    assert regret.judge(30.0, current=4, need=4.5, missed=True) == 5
    regret.released(40.0, before=5, after=1)  # a release below the floor's count (the floor binds in the policy)
    assert regret.judge(50.0, current=1, need=1.5, missed=True) == 5  # the higher floor is kept
    with pytest.raises(ValueError, match="release regret"):
        ReleaseRegret(recent_s=0.0, hold_s=1.0)


def test_the_floor_is_the_proving_bursts_rate_at_the_capacity_now_never_above_the_count_released_from() -> None:
    # A release from 5 to 3; 73.5 req/s proves it wrong at 17.5 req/s a replica (4.2 replicas, more than the 3
    # released to). Held as that rate: the same burst needs 3 replicas at 25 req/s a replica and 4 at 20, and never
    # more than the 5 released from (a capacity cut further); the count itself where the capacity is unknown.
    regret = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    regret.released(100.0, before=5, after=3)
    assert regret.judge(200.0, current=3, need=4.2, missed=True, capacity_rps=17.5) == 5
    assert regret.floor(300.0, capacity_rps=25.0) == 3
    assert regret.floor(300.0, capacity_rps=20.0) == 4
    assert regret.floor(300.0, capacity_rps=10.0) == 5
    assert regret.floor(300.0) == 5
    assert regret.floor(200.0 + 3600.0, capacity_rps=25.0) is None
    # a second regret while held keeps the higher rate (and count); one judged at an unknown capacity holds the count
    regret.released(400.0, before=4, after=2)
    assert regret.judge(450.0, current=2, need=2.5, missed=True, capacity_rps=20.0) == 5  # 17.5 read within 420 s
    assert regret.floor(460.0, capacity_rps=20.0) == 4  # 73.5 / 20, not 50 / 20
    # judged each tick, it converts at the lowest capacity read over recent_s: a light mix read in a silence between
    # bursts (25 req/s) does not lower the floor while the proving minute's 17.5 is within it
    ticks = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    ticks.released(100.0, before=5, after=3)
    assert ticks.judge(200.0, current=3, need=4.2, missed=True, capacity_rps=17.5) == 5
    assert ticks.judge(400.0, current=5, need=1.0, missed=False, capacity_rps=25.0) == 5
    assert ticks.judge(621.0, current=5, need=1.0, missed=False, capacity_rps=20.0) == 4  # 17.5 read 421 s ago
    assert ticks.judge(622.0, current=4, need=1.0, missed=False) == 5  # capacity unknown this tick: the count
    unknown = ReleaseRegret(recent_s=420.0, hold_s=3600.0)
    unknown.released(100.0, before=5, after=3)
    assert unknown.judge(200.0, current=3, need=4.2, missed=True) == 5
    assert unknown.floor(300.0, capacity_rps=25.0) == 5


def _need(per_tick: list[float], slo_s: float) -> float | None:
    peak = BurstPeak(window_s=30.0, hold_s=60.0, slo_s=slo_s)
    finished = 0.0
    for i, n in enumerate(per_tick):
        finished += n
        peak.update(i * TICK_S, [("r0", finished, 0.0)])
    return peak.need_since(0.0)


def test_service_need_is_the_rate_no_run_of_arrivals_waits_past_the_slo_under() -> None:
    # 100 arrivals in one 5 s tick of a 30 s window: the 30 s rate reads 3.3 req/s; served at c from the tick's
    # start, the last request waits 100 / c − 5 s: within a 2 s SLO iff c ≥ 100 / 7.
    assert _need([0.0] * 8 + [100.0] + [0.0] * 3, slo_s=2.0) == pytest.approx(100.0 / 7.0)
    # a steady 10 requests a tick (2 req/s): the longest run binds, 2 · d / (d + S) → just under the rate
    assert _need([10.0] * 12, slo_s=2.0) == pytest.approx(60.0 / 32.0)
    # no SLO allowance: the highest single tick's rate
    assert _need([0.0] * 7 + [10.0, 40.0, 10.0], slo_s=0.0) == pytest.approx(8.0)
    assert BurstPeak(window_s=30.0, hold_s=60.0).need_since(0.0) is None


def _demand(**kw: object) -> Demand:
    fields: dict[str, object] = {
        "current_replicas": 2,
        "ready_replicas": 2,
        "capacity_rps": 10.0,
        "arrival_rate": 4.0,
        "forecast_upper_rate": 4.0,
        "requests_waiting": 0.0,
    }
    return Demand(**(fields | kw))  # type: ignore[arg-type]


def test_the_floor_raises_the_need_and_names_itself() -> None:
    policy = ReplicaPolicy(PolicyConfig(target_utilisation=0.8))
    rec = policy.recommend(_demand(regret_floor=3, stuck_replicas=1), now=0.0)
    assert (rec.desired_replicas, rec.reason) == (4, "release_regret")  # the stuck replica on top
    assert "a release from 3" in rec.message
    low = ReplicaPolicy(PolicyConfig(target_utilisation=0.8)).recommend(
        _demand(regret_floor=1, arrival_rate=25.0, forecast_upper_rate=25.0), now=0.0
    )
    assert (low.desired_replicas, low.reason) == (4, "predictive")  # a floor below the need changes nothing


def test_on_by_default_and_off_at_zero() -> None:
    assert PlannerConfig().release_regret_s == 3600.0
    off = ReleaseRegret(recent_s=420.0, hold_s=0.0)
    off.released(0.0, before=3, after=1)
    assert off.judge(1.0, current=1, need=9.0, missed=True) is None


def test_the_planner_judges_its_release_on_the_minutes_arrivals_and_slo_reading() -> None:
    # 10 req/s a replica; a release from 3 to 2 at 100 s; then 150 requests in one 5 s tick: 150 / 7 = 21.4 req/s,
    # 2.1 replicas, more than the 2 released to. With the minute's SLO reading late the floor is 3; on time, none.
    def planner(**kw: float) -> _DeploymentPlanner:
        p = Planner(PlannerConfig(slo_ttft_s=2.0, **kw)).planner_for("prod/llm")
        finished = 0.0
        for i in range(30):
            finished += 150.0 if i == 28 else 0.0
            p.burst.update(i * TICK_S, [("r0", finished, 0.0)])
        p.regret.released(100.0, before=3, after=2)
        return p

    late = planner()
    late._slo_missed = True
    assert late._regret_floor(145.0, 2, 10.0) == 3
    assert late._regret_floor(146.0, 2, 10.0) == 3  # held
    # the burst's 21.4 req/s held, not the count, at the lowest capacity of the burst floor's memory (420 s): the 10
    # req/s of 145 s still binds at 200 s; from 567 s on only 20 is read, and two serve it (the count read at 10:
    # three, held for the hour on 1fe5b3e)
    assert late._regret_floor(200.0, 2, 20.0) == 3
    assert late._regret_floor(567.0, 2, 20.0) == 2
    assert late._regret_floor(568.0, 2, 5.0) == 3  # never more than the count released from
    on_time = planner()
    assert on_time._regret_floor(145.0, 2, 10.0) is None
    slower = planner()
    slower._slo_missed = True
    assert slower._regret_floor(145.0, 2, 11.0) is None  # at 11 req/s a replica 2 serve 21.4 within the SLO
    off = planner(release_regret_s=0.0)
    off._slo_missed = True
    assert off._regret_floor(145.0, 2, 10.0) is None
