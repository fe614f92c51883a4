"""A target silent across a step of the wall clock (NTP) goes stale, down and forgotten after the same silence as
without the step: the loop hands FleetState its step-free offset (collector.clock.StepFreeTime). Before, a replica
silent since before a step back of an hour kept a sample stamped in the "future": ready (its frozen rates summed
into its deployment's) and never down nor forgotten for the hour; a GPU exporter likewise never down; a step ahead
downed and forgot both at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from collector.samples import GpuSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from tests.helpers.clocks import SteppingClock
from tests.unit.kvpilot.fleet_double import ENGINE, START, make_service, serving_sample

KEY = "llm/chat"
TICKS, SILENT_AT = 80, 10
LOST = TargetInfo(url="http://10.0.0.2:8000/metrics", namespace="llm", deployment="chat", pod="chat-1", node="n1")
LOST_GPU = TargetInfo(url="http://10.0.0.2:9400/metrics", kind="gpu", node="n1")


@dataclass
class TwoReplicas:
    """chat-0 on n0 answers throughout; chat-1 on n1 and n1's GPU exporter answer until tick ``SILENT_AT``, then
    fall silent: their scrapes fail (``failing``) or they are simply no longer in the answer (a series gone from a
    PromQL answer). Samples are stamped with the wall clock, as a scrape stamps them."""

    clock: SteppingClock
    failing: bool
    collected: int = 0

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        silent = self.collected >= SILENT_AT
        self.collected += 1
        results = [ScrapeResult(ENGINE, True, t, 0.01, replicas=(serving_sample("chat-0", "n0", t),), engine="vllm")]
        gpu = GpuSample(node="n1", index="0", uuid="GPU-1", model_name="H100", timestamp=t, utilisation=0.5)
        if not silent:
            results.append(
                ScrapeResult(LOST, True, t, 0.01, replicas=(serving_sample("chat-1", "n1", t),), engine="vllm")
            )
            results.append(ScrapeResult(LOST_GPU, True, t, 0.01, gpus=(gpu,)))
        elif self.failing:
            results.append(ScrapeResult(LOST, False, t, 1.0, error="timed out"))
            results.append(ScrapeResult(LOST_GPU, False, t, 1.0, error="timed out"))
        return CollectResult(timestamp=t, results=tuple(results))


async def _run(tmp_path: Any, step_s: float, failing: bool) -> list[tuple[bool, bool, bool, bool, bool, int]]:
    """``TICKS`` ticks 5 s apart, the wall clock stepped by ``step_s`` before tick ``SILENT_AT`` (the first that
    misses chat-1). Per tick: chat-1 known, chat-1 ready, chat-1's engine down, n1's GPU known, n1's exporter down,
    the deployment's ready replicas."""
    clock = SteppingClock(START)
    fleet = TwoReplicas(clock, failing)
    db = f"sqlite:///{tmp_path / f'kv{step_s:+.0f}{failing}.db'}"
    service, _, _ = make_service(db, clock, fleet)  # type: ignore[arg-type]
    seen = []
    for i in range(TICKS):
        if i:
            clock.advance(5.0)
        if i == SILENT_AT:
            clock.step(step_s)
        snapshot = await service.loop.tick()
        lost = [r for r in snapshot.replicas if r.sample.replica == "chat-1"]
        down = {(f.subject.replica, f.subject.node) for f in snapshot.findings if f.kind == "target_down"}
        seen.append(
            (
                bool(lost),
                bool(lost) and lost[0].ready,
                ("chat-1", "n1") in down,
                any(g.sample.node == "n1" for g in snapshot.gpus),
                ("", "n1") in down,
                snapshot.deployments[KEY].ready_replicas,
            )
        )
    return seen


@pytest.mark.parametrize("failing", [True, False], ids=["scrape-fails", "absent"])
@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_target_silent_across_a_clock_step_goes_stale_after_the_same_silence(
    tmp_path: Any, step_s: float, failing: bool
) -> None:
    stepped = await _run(tmp_path, step_s, failing)
    steady = await _run(tmp_path, 0.0, failing)
    # What the unstepped run shows, so that the comparison means something: chat-1 ready until its last sample is
    # stale_after_s (30 s) old, its engine and n1's exporter down from then at the latest (a failing scrape at once,
    # through the detector's hysteresis), both forgotten forget_after_s (300 s) after their last scrape.
    known = [i for i, s in enumerate(steady) if s[0]]
    ready = [i for i, s in enumerate(steady) if s[1]]
    assert ready == list(range(SILENT_AT + 6))  # last sample at tick SILENT_AT - 1; 30 s later is tick SILENT_AT + 5
    assert known == list(range(SILENT_AT + 60))  # 300 s: forgotten at tick SILENT_AT + 60
    assert [i for i, s in enumerate(steady) if s[3]] == known  # n1's GPU likewise
    assert any(s[2] for s in steady[SILENT_AT:])  # chat-1's engine down
    assert any(s[4] for s in steady[SILENT_AT:])  # n1's exporter down
    assert [s[5] for s in steady[SILENT_AT + 6 :]] == [1] * (TICKS - SILENT_AT - 6)
    assert stepped == steady
