"""A restart keeps the capacity it learned (review G2, session 20): the learned capacity was written to the store once
a minute and never read back, so a kvpilot restarted during a burst held (`no_capacity`) at the current count until
its replicas had been saturated for ``min_learned_samples`` ticks again. ``restore`` now reads the stored learned
capacity (within ``scaler.warm_start_s``) and ``seed_capacity`` starts each deployment's model from it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from collector.clock import VirtualClock
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from kvpilot.runtime.restore import seed_capacity
from scaler.capacity import CapacityConfig, CapacityModel, TokenMix
from scaler.planner import Planner, PlannerConfig
from store import repo
from store.db import transaction
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import ENGINE, START, ScriptedFleet, make_service, run_ticks, serving_sample


@dataclass
class BusyFleet(ScriptedFleet):
    """llm/chat's one replica finishing 4 requests/s with ``waiting`` queued: saturated (>= 2 per replica)."""

    waiting: float = 30.0

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = self.clock.now()
        sample = serving_sample("chat-0", "n0", t, rate=self.rate, waiting=self.waiting)
        self.collected += 1
        return CollectResult(
            timestamp=t, results=(ScrapeResult(ENGINE, True, t, 0.01, replicas=(sample,), engine="vllm"),)
        )


async def _learn_and_stop(url: str, clock: VirtualClock, fleet: BusyFleet) -> float:
    """Run until a learned capacity is stored, stop; returns it (requests/s)."""
    first, restored, timer = make_service(url, clock, fleet)
    assert restored.capacities == {}
    await first.start(restored)
    await run_ticks(first, timer, 16)  # saturated from the start; the capacity row is written once a minute
    await until(lambda: first.writer.pending == 0, what="flushed")
    assert first.snapshot().decisions["llm/chat"].reason != "no_capacity"
    with transaction(first.sessions) as s:
        row = repo.get_capacity(session=s, deployment="llm/chat")
    assert row is not None
    assert row.source == "observed"
    first.stop.set()
    await first.wait()
    return float(row.requests_per_s or math.nan)


async def test_the_first_decision_after_a_restart_is_sized_from_the_stored_capacity(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    clock = VirtualClock(START)
    fleet = BusyFleet(clock)
    stored = await _learn_and_stop(url, clock, fleet)

    clock.advance(20)
    second, restored, timer = make_service(url, clock, fleet)
    assert restored.capacities == {"llm/chat": pytest.approx(stored)}
    assert second.loop.planner.capacity("llm/chat") == (pytest.approx(stored), "learned")
    await second.start(restored)
    await run_ticks(second, timer, 1)
    decision = second.snapshot().decisions["llm/chat"]
    assert decision.reason != "no_capacity"
    assert decision.desired_replicas > 1  # 30 waiting on one replica: sized up at once, not held
    second.stop.set()
    await second.wait()


async def test_a_capacity_stored_before_the_warm_start_span_is_not_trusted(tmp_path) -> None:
    """Older than ``scaler.warm_start_s`` (kvpilot down that long, the deployment may have changed shape): learned
    again, as before (the first decisions hold)."""
    url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    clock = VirtualClock(START)
    fleet = BusyFleet(clock)
    await _learn_and_stop(url, clock, fleet)

    clock.advance(400)
    second, restored, timer = make_service(url, clock, fleet, overrides={"scaler": {"warm_start_s": 300}})
    assert restored.capacities == {}
    await second.start(restored)
    await run_ticks(second, timer, 1)
    assert second.snapshot().decisions["llm/chat"].reason == "no_capacity"
    second.stop.set()
    await second.wait()


def test_seed_learned_starts_a_model_that_has_learned_nothing() -> None:
    model = CapacityModel(CapacityConfig())
    assert model.source == "unknown"
    assert model.seed_learned(12.5)
    assert model.source == "learned"
    assert model.requests_per_s() == pytest.approx(12.5)
    # at another mix it scales as a learned capacity does (work units)
    assert model.requests_per_s(TokenMix(2000.0, 400.0)) == pytest.approx(6.25)
    assert not model.seed_learned(99.0)  # something is learned already: kept
    assert model.requests_per_s() == pytest.approx(12.5)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_seed_learned_refuses_what_is_not_a_capacity(bad: float) -> None:
    model = CapacityModel(CapacityConfig())
    assert not model.seed_learned(bad)
    assert model.source == "unknown"


def test_a_configured_capacity_still_plans_and_other_planners_are_passed_over() -> None:
    planner = Planner(PlannerConfig(capacity=CapacityConfig(requests_per_s=3.0)))
    assert seed_capacity(planner, {"llm/chat": 9.0, "not a key": 1.0}) == 1
    assert planner.capacity("llm/chat") == (pytest.approx(3.0), "configured")
    assert planner.planner_for("llm/chat").capacity.learned_requests_per_s() == pytest.approx(9.0)
    assert seed_capacity(object(), {"llm/chat": 9.0}) == 0  # type: ignore[arg-type]
