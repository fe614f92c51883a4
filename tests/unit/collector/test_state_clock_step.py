"""FleetState after the wall clock steps back (NTP) by more than ``stale_after_s``: the replica's window starts again
from the new sample. Before, every later sample was dropped as out of order for as long as the step (an hour) while
the replica stayed ready on its pre-step reading and rates: the planner decided on frozen numbers."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState

START = 1_700_000_000.0


def _sample(true_t: float, wall: float, rate: float) -> ReplicaSample:
    """A replica finishing ``rate`` requests/s (its counter on true time), stamped with the (stepped) wall clock."""
    base = ReplicaSample(
        namespace="llm", deployment="chat", replica="chat-0", node="n0", engine="vllm", model="m", timestamp=wall
    )
    return replace(base, requests_finished=rate * (true_t - START), requests_running=4, kv_usage=0.4)


def _run(step_s: float, rate_after: float) -> list[tuple[bool, float, float | None]]:
    """60 ticks of 5 s; the wall clock steps by ``step_s`` at tick 30, when the rate changes to ``rate_after``."""
    state = FleetState()
    seen = []
    finished = 0.0
    for i in range(60):
        true_t, wall = START + 5 * i, START + 5 * i + (step_s if i >= 30 else 0.0)
        rate = 4.0 if i < 30 else rate_after
        finished += rate * 5 if i else 0.0
        sample = replace(_sample(true_t, wall, rate), requests_finished=finished)
        state.observe([sample], [], now=wall)
        (view,) = state.replicas()
        seen.append((view.ready, view.last_seen - wall, view.requests_finished_rate))
    return seen


@pytest.mark.parametrize("step_s", [-3600.0, -40.0])
def test_a_step_back_starts_the_window_again_from_the_new_sample(step_s: float, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="collector.state"):
        seen = _run(step_s, rate_after=8.0)
    ready, age, rate = seen[29]
    assert (ready, age, rate) == (True, 0.0, pytest.approx(4.0))
    assert seen[30][:2] == (True, 0.0)  # the new sample is the reading, not the pre-step one
    assert seen[30][2] is None  # one sample in the new window: no rate yet
    for ready, age, rate in seen[32:]:
        assert (ready, age) == (True, 0.0)
        assert rate == pytest.approx(8.0)  # the new load, not the frozen 4 req/s
    steps = [r for r in caplog.records if "stepped back over" in r.getMessage()]
    assert len(steps) == 1  # said once


@pytest.mark.parametrize("step_s", [-30.0, -5.0, 3600.0])
def test_a_small_step_back_or_a_step_forward_keeps_the_window(step_s: float, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="collector.state"):
        seen = _run(step_s, rate_after=4.0)
    assert all(ready for ready, _, _ in seen)
    assert seen[-1][2] == pytest.approx(4.0)
    assert not [r for r in caplog.records if "stepped back over" in r.getMessage()]


@pytest.mark.parametrize("step_s", [-3600.0, -40.0])
def test_the_deployment_history_starts_again_after_a_step_back(step_s: float) -> None:
    # Its points were kept only when later than the last: after a step back none was for as long as the step, and
    # the windows read from it (the rollout detector's recent peak, the prefix baselines) read the hour before.
    state = FleetState()
    for i in range(40):
        wall = START + 5 * i + (step_s if i >= 30 else 0.0)
        state.observe([_sample(START + 5 * i, wall, 4.0)], [], now=wall)
    times = [p.t for p in state.deployment_history("llm/chat")]
    assert times == [START + step_s + 5 * i for i in range(30, 40)]


def test_a_small_step_back_keeps_the_deployment_history() -> None:
    state = FleetState()
    for i in range(40):
        wall = START + 5 * i - (20.0 if i >= 30 else 0.0)
        state.observe([_sample(START + 5 * i, wall, 4.0)], [], now=wall)
    times = [p.t for p in state.deployment_history("llm/chat")]
    assert times[:30] == [START + 5 * i for i in range(30)]
    assert times == sorted(times)
