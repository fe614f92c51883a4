"""A window of a deployment's history (``FleetState.deployment_history_since``) is the history's points at or after
its start, whatever the ticks, the aggregates and the clock did: the rollout detector reads its peak from it."""

from __future__ import annotations

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
