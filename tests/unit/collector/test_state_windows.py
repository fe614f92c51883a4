"""A window of a deployment's history (``FleetState.deployment_history_since``) is the history's points at or after
its start, whatever the ticks, the aggregates and the clock did: the rollout detector reads its peak from it. A window
of a replica's history (``replica_history_since``, ``replica_history_newest``, ``replica_history_start``) is the same
part of ``replica_history``, whichever tiers it spans: the KV detector, the exported projection, the rollout and
stuck-GPU detectors and the version speed read these."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.aggregates import DeploymentAggregate
from collector.samples import ReplicaSample
from collector.state import FleetState

KEY = "prod/llama"


def sample(t: float, replica: str = "r0") -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment="llama", replica=replica, node="n0", engine="vllm", model="m", timestamp=t
    )
    return replace(base, requests_running=t % 7)


# Each step: (seconds the clock moves, which may be back or nothing; whether Prometheus' aggregate follows observe).
steps = st.lists(
    st.tuples(st.sampled_from([5.0, 5.0, 5.0, 0.0, 0.5, 60.0, -3.0, -12.0]), st.booleans()), min_size=1, max_size=60
)


@settings(max_examples=200, deadline=None)
@given(steps=steps, starts=st.lists(st.floats(-50.0, 500.0), max_size=6))
def test_a_window_is_the_history_from_its_start(steps: list[tuple[float, bool]], starts: list[float]) -> None:
    state = FleetState(history_s=120.0, max_points=16)
    now = 0.0
    for moved, aggregated in steps:
        now += moved
        state.observe([sample(now)], [], now=now)
        if aggregated:
            agg = DeploymentAggregate(namespace="prod", deployment="llama", timestamp=now, replicas=2, ready_replicas=1)
            state.observe_deployments([agg], now=now)
    history = state.deployment_history(KEY)
    times = [p.t for p in history]
    assert times == sorted(set(times))  # increasing, even after the clock went back
    for since in [*starts, *times, now + 1.0]:  # every point's own time: a window starting exactly on it keeps it
        assert state.deployment_history_since(KEY, since) == tuple(p for p in history if p.t >= since)
    assert state.deployment_history_since("prod/unknown", 0.0) == ()


def test_an_aggregate_after_the_clock_went_back_replaces_the_points_it_is_not_after() -> None:
    state = FleetState()
    for t in (0.0, 5.0, 10.0):
        state.observe([sample(t)], [], now=t)
    agg = DeploymentAggregate(namespace="prod", deployment="llama", timestamp=4.0, replicas=3, ready_replicas=3)
    state.observe_deployments([agg], now=4.0)  # the clock stepped back 6 s
    history = state.deployment_history(KEY)
    assert [p.t for p in history] == [0.0, 4.0]  # once the points at 5 and 10 s stayed, before 4 s
    assert history[-1].replica_count == 3


# Replica histories over every tier: (rate window, full resolution, history, step, most points), each with a one-line
# reason: the defaults' shape, small; no middle tier (full resolution = rate window); every sample kept one tier;
# a count cap below the time bounds.
replica_tiers = st.sampled_from(
    [
        (20.0, 40.0, 120.0, 10.0, 4096),  # recent, middle and older all hold samples
        (20.0, 20.0, 120.0, 10.0, 4096),  # middle empties at every sample: older follows recent
        (20.0, 120.0, 120.0, 10.0, 4096),  # nothing thinned: older stays empty
        (20.0, 40.0, 120.0, 10.0, 3),  # max_points cuts each tier shorter than its time
    ]
)
replica_steps = st.lists(st.sampled_from([5.0, 5.0, 5.0, 2.5, 0.0, -5.0, 15.0, 70.0]), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(tiers=replica_tiers, moves=replica_steps, starts=st.lists(st.floats(-50.0, 700.0), max_size=4))
def test_a_replica_window_is_its_history_from_its_start(
    tiers: tuple[float, float, float, float, int], moves: list[float], starts: list[float]
) -> None:
    rate_window_s, full_resolution_s, history_s, step_s, max_points = tiers
    state = FleetState(
        rate_window_s=rate_window_s,
        full_resolution_s=full_resolution_s,
        history_s=history_s,
        history_step_s=step_s,
        max_points=max_points,
        stale_after_s=1000.0,
    )
    t = 0.0
    for moved in moves:
        t += moved  # 0 and back: a sample not newer than the latest, which observe drops
        state.observe([sample(t)], [], now=max(t, 0.0))
        history = state.replica_history("prod/r0")
        times = [s.timestamp for s in history]
        assert times == sorted(set(times))
        # before the first, on every sample (kept: "at or after"), between two, after the last, and the open ends
        for since in [*starts, *times, *(x + 0.5 for x in times), -math.inf, math.inf]:
            window = state.replica_history_since("prod/r0", since)
            assert window == tuple(s for s in history if s.timestamp >= since)
            assert all(a is b for a, b in zip(window, history[len(history) - len(window) :], strict=True))
        for n in range(len(history) + 2):
            assert state.replica_history_newest("prod/r0", n) == (history[max(0, len(history) - n) :] if n else ())
        assert state.replica_history_start("prod/r0") == history[0].timestamp


def test_a_replica_window_at_its_edges() -> None:
    state = FleetState(rate_window_s=20.0, full_resolution_s=40.0, history_s=120.0, history_step_s=10.0)
    # unknown replica: empty, as replica_history
    assert state.replica_history_since("prod/r0", 0.0) == ()
    assert state.replica_history_newest("prod/r0", 2) == ()
    assert state.replica_history_start("prod/r0") is None
    for t in range(0, 205, 5):
        state.observe([sample(float(t))], [], now=float(t))
    history = state.replica_history("prod/r0")
    assert history[0].timestamp == 80.0  # 120 s kept, older ones one per 10 s
    assert state.replica_history_since("prod/r0", -1.0) is history  # from before the first: the whole history
    assert state.replica_history_since("prod/r0", 80.0) is history  # on the first: it is kept
    assert state.replica_history_since("prod/r0", 200.5) == ()  # after the last
    latest = state.replica_history_since("prod/r0", 200.0)  # on the last: the last alone
    assert [s.timestamp for s in latest] == [200.0]
    # a window across the tiers: one per 10 s before 160 s, every sample from there
    assert [s.timestamp for s in state.replica_history_since("prod/r0", 140.0)] == [140.0, 150.0, *range(160, 205, 5)]
    assert state.replica_history_start("prod/r0") == 80.0
    # the same window asked for again (the detector, the projection, the version speed in one tick): the same tuple,
    # until the next sample arrives
    window = state.replica_history_since("prod/r0", 170.0)
    assert state.replica_history_since("prod/r0", 170.0) is window
    state.observe([sample(205.0)], [], now=205.0)
    after = state.replica_history_since("prod/r0", 170.0)
    assert after is not window
    assert after[-1].timestamp == 205.0
