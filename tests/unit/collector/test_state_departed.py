"""A replica that discovery stopped listing is forgotten at once, not left to age into "down"."""

from __future__ import annotations

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState


def _sample(replica: str, t: float) -> ReplicaSample:
    return ReplicaSample(
        namespace="prod", deployment="llm", replica=replica, node="n1", engine="vllm", model="m", timestamp=t,
        requests_waiting=1.0, requests_running=2.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("departed", "expected"),
    [
        # scaled down: gone from the fleet and from the deployment's sums in the same tick
        ({"prod/llm-1"}, ["llm-0"]),
        # not told: the replica lingers with its last sample (and ages towards stale, then "down")
        (set(), ["llm-0", "llm-1"]),
        # a key that was never seen is harmless
        ({"prod/never"}, ["llm-0", "llm-1"]),
    ],
)
def test_departed_replicas_are_forgotten(departed, expected):
    state = FleetState(stale_after_s=30.0)
    state.observe([_sample("llm-0", 0.0), _sample("llm-1", 0.0)], [], now=0.0)
    state.observe([_sample("llm-0", 5.0)], [], now=5.0, departed=departed)
    assert sorted(r.sample.replica for r in state.replicas()) == expected
    deployment = state.deployments()["prod/llm"]
    assert len(deployment.replicas) == len(expected)
