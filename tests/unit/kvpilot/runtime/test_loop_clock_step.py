"""The planner's time does not step when the wall clock does (NTP): the loop hands it `StepFreeTime`, and stamps its
decisions on the wall clock. Before, a step back of an hour had the forecasters refuse every point for the hour
(stamped before their last: here the planner then asked 3-4 replicas, `reactive`, where the unstepped run asked 5-6),
and a step ahead aged every window and hold by the hour at once (BENCHMARKS.md, "Clock steps through the planner")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from collector.samples import ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from scaler.decision import Decision
from scaler.planner import Planner
from tests.helpers.clocks import SteppingClock
from tests.unit.kvpilot.fleet_double import ENGINE, START, make_service, serving_sample

KEY = "llm/chat"
TICKS, STEP_AT = 50, 20


@dataclass
class SteadyFleet:
    """llm/chat's replica, its counters running on true time (the clock's monotonic reading: the engine's own
    counts do not step) at 4 requests/s, then 8 from tick 25; each sample stamped with the wall clock, as a scrape
    stamps it."""

    clock: SteppingClock
    collected: int = 0

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        wall, true_t = self.clock.now(), self.clock.monotonic()
        self.collected += 1
        finished = 4.0 * (true_t - START) + 4.0 * max(0.0, true_t - (START + 5 * 25))
        sample: ReplicaSample = replace(
            serving_sample("chat-0", "n0", wall, waiting=3), requests_finished=finished, prompt_tokens=500 * finished
        )
        sample = replace(sample, generation_tokens=100 * finished)
        return CollectResult(
            timestamp=wall, results=(ScrapeResult(ENGINE, True, wall, 0.01, replicas=(sample,), engine="vllm"),)
        )


async def _run(tmp_path: Any, step_s: float) -> tuple[list[float], list[Decision], list[float], Planner]:
    """``TICKS`` ticks 5 s apart, the wall clock stepped by ``step_s`` before tick ``STEP_AT``; returns the times the
    planner was handed, the decisions (as published) and the wall time of each tick."""
    clock = SteppingClock(START)
    fleet = SteadyFleet(clock)
    service, _, _ = make_service(f"sqlite:///{tmp_path / f'kv{step_s:+.0f}.db'}", clock, fleet)  # type: ignore[arg-type]
    planner = service.loop.planner
    assert isinstance(planner, Planner)
    handed: list[float] = []
    decide = planner.decide

    def spy(state: Any, now: float, **kw: Any) -> list[Decision]:
        handed.append(now)
        return decide(state, now, **kw)

    planner.decide = spy  # type: ignore[method-assign]
    decisions, walls = [], []
    for i in range(TICKS):
        if i:
            clock.advance(5.0)
        if i == STEP_AT:
            clock.step(step_s)
        walls.append(clock.now())
        snapshot = await service.loop.tick()
        decisions.append(snapshot.decisions[KEY])
    return handed, decisions, walls, planner


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_the_planner_decides_on_time_that_does_not_step(tmp_path: Any, step_s: float) -> None:
    handed, decisions, walls, planner = await _run(tmp_path, step_s)
    steady, steady_decisions, _, steady_planner = await _run(tmp_path, 0.0)
    assert handed == steady == [START + 5 * i for i in range(TICKS)]  # the step is not in the planner's time
    assert [d.timestamp for d in decisions] == walls  # what is stored and published is stamped on the wall clock
    assert walls[STEP_AT] - walls[STEP_AT - 1] == 5 + step_s
    forecaster = planner.planner_for(KEY).forecaster
    assert forecaster.rejected_inputs == 0  # before: every point after a step back refused
    # What the planner read and decided is the unstepped run's but for one rate window from the step's tick: the
    # collector starts its windows again from that tick's sample (FleetState, a step of more than stale_after_s
    # back; a step ahead prunes the window to it), so the rates there span less time.
    refill = range(STEP_AT, STEP_AT + 13)
    mine, theirs = planner.planner_for(KEY).forecaster, steady_planner.planner_for(KEY).forecaster
    read = {round((t - START) / 5): v for t, v in zip(mine.times, mine.values, strict=True)}
    steady_read = {round((t - START) / 5): v for t, v in zip(theirs.times, theirs.values, strict=True)}
    assert {i: v for i, v in read.items() if i not in refill} == {
        i: pytest.approx(v) for i, v in steady_read.items() if i not in refill
    }
    assert [(d.desired_replicas, d.reason) for i, d in enumerate(decisions) if i not in refill] == [
        (d.desired_replicas, d.reason) for i, d in enumerate(steady_decisions) if i not in refill
    ]
