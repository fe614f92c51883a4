"""A load the float arithmetic carries past its range: one deployment's PromQL aggregate of 1e308 requests/s with as
many waiting (one engine exporting 1e308 for its queue, summed by Prometheus) made the replica count inf, and
math.ceil(inf) raised OverflowError in the planner: its stage failed, so no deployment was decided that tick, every
tick (the loop logs the traceback and goes on without decisions; KEDA's fallback after the staleness limit)."""

from __future__ import annotations

import math

import pytest

from collector.aggregates import DeploymentAggregate
from collector.state import FleetState
from scaler.planner import Planner, PlannerConfig
from scaler.policy import (
    MOST_REPLICAS,
    PolicyConfig,
    _count,
    adaptive_replicas,
    lean_replicas,
    pooled_replicas,
    release_replicas,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("replicas", "count"),
    [(math.inf, MOST_REPLICAS), (math.nan, MOST_REPLICAS), (1e300, MOST_REPLICAS), (2.5, 3), (2.0 + 1e-12, 2), (-3, 0)],
)
def test_a_count_is_within_what_kubernetes_counts(replicas: float, count: int) -> None:
    assert _count(replicas) == count


def test_the_policy_counts_take_an_overflowing_load() -> None:
    assert lean_replicas(1e308, 1.7e308, 0.5, 0.8) == MOST_REPLICAS
    assert pooled_replicas(math.inf, 0.8) == MOST_REPLICAS
    assert adaptive_replicas(1e308, 1.7e308, 1e-3, 0.8, 0.5) == MOST_REPLICAS
    assert release_replicas(1e308, 1e308) == MOST_REPLICAS


def _aggregate(deployment: str, now: float, *, arrival: float, waiting: float) -> DeploymentAggregate:
    return DeploymentAggregate(
        namespace="llm",
        deployment=deployment,
        timestamp=now,
        replicas=2,
        ready_replicas=2,
        arrival_rate=arrival,
        requests_finished_rate=4.0,
        requests_waiting=waiting,
        requests_running=4.0,
        kv_usage_mean=0.4,
        kv_usage_max=0.5,
    )


def test_one_deployments_overflowing_load_leaves_every_deployment_decided() -> None:
    state = FleetState()
    planner = Planner(PlannerConfig(policy=PolicyConfig(max_replicas=40)))
    for i in range(30):
        now = NOW + 5 * i
        huge = i >= 10  # once capacity is learned (before, the planner held and never counted)
        chat = _aggregate("chat", now, arrival=1e308 if huge else 4.0, waiting=1e308 if huge else 1.0)
        state.observe([], [], now=now)
        state.observe_deployments([chat, _aggregate("code", now, arrival=4.0, waiting=1.0)], now=now)
        decisions = {d.deployment: d for d in planner.decide(state, now)}
        assert set(decisions) == {"llm/chat", "llm/code"}
    assert decisions["llm/chat"].desired_replicas == 40  # max_replicas binds
    assert decisions["llm/code"].desired_replicas < 40
