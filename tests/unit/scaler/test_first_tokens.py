"""Prompt tokens per first token: the prompt mix of what a fleet filling from empty admits, where prompt tokens per
finished request read it heavy (it has prefilled more requests than it finished)."""

from __future__ import annotations

import pytest

from collector.samples import Histogram, ReplicaSample
from collector.state import FleetState
from scaler.capacity import CapacityConfig, TokenMix
from scaler.first_tokens import PromptPerFirstToken
from scaler.planner import Planner, planner_config
from tests.unit.scaler.test_planner_capacity import PROFILE

TICK_S = 5.0


@pytest.mark.parametrize(
    ("ticks", "expected"),
    [
        # one replica: 10 first tokens of 1,000 prompt tokens a tick
        ([[("a", 0.0, 0.0)], [("a", 10_000.0, 10.0)], [("a", 20_000.0, 20.0)]], 1000.0),
        # a restart: the counters start again from zero, and what they show is new
        ([[("a", 0.0, 0.0)], [("a", 10_000.0, 10.0)], [("a", 4_000.0, 2.0)]], 14_000.0 / 12.0),
        # a replica with no TTFT histogram is left out, not read as requests without first tokens
        ([[("a", 0.0, 0.0), ("b", 0.0, None)], [("a", 10_000.0, 10.0), ("b", 90_000.0, None)]], 1000.0),
        # a replica absent from a tick counts again from its next two
        ([[("a", 0.0, 0.0)], [], [("a", 30_000.0, 10.0)], [("a", 40_000.0, 20.0)]], 1000.0),
        # no first token yet: unknown, not zero
        ([[("a", 0.0, 0.0)], [("a", 0.0, 0.0)]], None),
    ],
)
def test_prompt_per_first_token(ticks: list[list[tuple[str, float, float | None]]], expected: float | None) -> None:
    reader = PromptPerFirstToken(window_s=60.0)
    got = None
    for i, replicas in enumerate(ticks):
        got = reader.update(i * TICK_S, replicas)
    assert got == (None if expected is None else pytest.approx(expected))


def test_old_ticks_leave_the_window() -> None:
    reader = PromptPerFirstToken(window_s=10.0)
    reader.update(0.0, [("a", 0.0, 0.0)])
    reader.update(5.0, [("a", 50_000.0, 10.0)])  # 5,000 a request
    reader.update(10.0, [("a", 60_000.0, 20.0)])  # 1,000 a request
    assert reader.update(15.0, [("a", 70_000.0, 30.0)]) == pytest.approx(1000.0)


def _ttft(count: float) -> Histogram:
    return Histogram((1.0, float("inf")), (count, count), count * 0.5, count)


def test_a_fleet_filling_from_empty_is_sized_for_the_prompts_it_admits() -> None:
    # Two replicas overloaded from the first tick prefill 3 req/s each of 4,000-token prompts but finish only 2:
    # prompt tokens per finished request read 6,000, and the fleet was sized for requests half again as heavy
    # (Mooncake ×8's first minute read 28,655 where the trace's prompts are ~11,000: 2 → 52 replicas).
    state = FleetState()
    planner = Planner(
        planner_config(
            cold_start_s=120.0,
            tick_s=TICK_S,
            min_replicas=1,
            max_replicas=100,
            capacity=CapacityConfig(profile=PROFILE),
        )
    )
    for i in range(20):
        t = i * TICK_S
        samples = [
            ReplicaSample(
                namespace="prod",
                deployment="llm",
                replica=r,
                node="n",
                engine="vllm",
                model=None,
                timestamp=t,
                requests_waiting=20.0 * (i + 1),
                requests_running=5.0 * i,  # the batch fills: 15 prefilled a tick, 10 finished
                requests_finished=10.0 * i,
                prompt_tokens=15.0 * i * 4000.0,
                generation_tokens=10.0 * i * 200.0,
                ttft=_ttft(15.0 * i),
            )
            for r in ("llm-0", "llm-1")
        ]
        state.observe(samples, [], now=t)
        (d,) = planner.decide(state, t, current_replicas={"prod/llm": 2})
    assert d.forecast["capacity_rps"] == pytest.approx(PROFILE.requests_per_s(TokenMix(4000, 200)), rel=0.02)
    assert "(4000 prompt, 200 output tokens" in d.message
