"""FleetState after the wall clock steps back (NTP) by more than ``stale_after_s``: the replica's window starts again
from the new sample. Before, every later sample was dropped as out of order for as long as the step (an hour) while
the replica stayed ready on its pre-step reading and rates: the planner decided on frozen numbers."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from collector.aggregates import DeploymentAggregate
from collector.samples import GpuSample, ReplicaSample
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


LAST_SAMPLES = {"the-tick-before": 9, "just-before-the-step": 10, "just-after-the-step": 10}


def _silent_after(step_s: float, last: str) -> list[tuple[bool, bool]]:
    """chat-0 scraped every 5 s, each sample half a second before the tick reads the clock, up to tick
    ``LAST_SAMPLES[last]``, then silent; the wall clock steps by ``step_s`` at tick 10: before that tick's scrape, or
    (``just-before-the-step``) between the scrape and the tick's reading, the sample keeping the wall time from before
    the step. FleetState is handed the loop's step-free offset (collector.clock.StepFreeTime: less the steps). Per
    tick of 80: the replica known, ready."""
    state = FleetState(stale_after_s=30, forget_after_s=300)
    seen = []
    for i in range(80):
        true_t = START + 5 * i
        wall = true_t + (step_s if i >= 10 else 0.0)
        samples = []
        if i <= LAST_SAMPLES[last]:
            stamp = (true_t if last == "just-before-the-step" and i == 10 else wall) - 0.5
            samples.append(_sample(true_t, stamp, 4.0))
        state.observe(samples, [], now=wall, step_free_offset_s=true_t - wall)
        views = state.replicas()
        seen.append((bool(views), bool(views) and views[0].ready))
    return seen


@pytest.mark.parametrize("last", list(LAST_SAMPLES))
@pytest.mark.parametrize("step_s", [-3600.0, -40.0, 40.0, 3600.0])
def test_a_replica_silent_across_a_step_goes_stale_and_is_forgotten_after_the_same_silence(
    step_s: float, last: str
) -> None:
    # Before, one silent since before a step back kept a sample stamped in the "future": ready and never forgotten
    # for the step's length; a step ahead (or one between a scrape and the tick's reading) forgot it at once.
    # `just-after-the-step` is a guard: a sample taken after the step ages as it did.
    seen = _silent_after(step_s, last)
    steady = _silent_after(0.0, last)
    n = LAST_SAMPLES[last]
    assert [i for i, (_, ready) in enumerate(steady) if ready] == list(range(n + 6))  # 30 s after the last sample
    assert [i for i, (known, _) in enumerate(steady) if known] == list(range(n + 60))  # 300 s after it
    assert seen == steady


def test_a_gpu_and_an_aggregate_silent_across_a_step_back_age_on_step_free_time() -> None:
    # A GPU exporter silent since before a step back was never down for the hour (target_down read its last page
    # from the "future"); Prometheus unreachable since before it, its last deployment aggregate counted every
    # replica ready for the hour. Both now age on step-free time, as without the step.
    def run(step_s: float) -> list[tuple[float | None, int | None]]:
        state = FleetState(stale_after_s=30, forget_after_s=300)
        agg = DeploymentAggregate(namespace="llm", deployment="chat", timestamp=START, replicas=3, ready_replicas=3)
        gpu = GpuSample(node="n1", index="0", uuid="GPU-1", model_name="H100", timestamp=START)
        out = []
        for i in range(80):
            true_t = START + 5 * i
            wall = true_t + (step_s if i >= 10 else 0.0)
            offset = true_t - wall
            state.observe([], [gpu] if i == 0 else [], now=wall, gpu_nodes_scraped=(), step_free_offset_s=offset)
            state.observe_deployments([agg], now=wall)  # the aggregate read at START, kept since
            gpus = {g.key: g.age_s for g in state.gpus()}
            view = state.deployments().get("llm/chat")
            out.append((gpus.get(gpu.key), None if view is None else view.ready_replicas))
        return out

    steady = run(0.0)
    assert [age for age, _ in steady] == [5.0 * i for i in range(61)] + [None] * 19  # forgotten after 300 s
    assert [ready for _, ready in steady] == [3] * 7 + [0] * 54 + [None] * 19  # stale after 30 s, ignored after 300
    assert run(-3600.0) == run(3600.0) == steady
