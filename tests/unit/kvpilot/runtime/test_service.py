"""The control-loop service in virtual time with the real FleetState, detectors, planner, store (SQLite through
the migrations), write buffer and metrics; only the fleet is scripted (tests/unit/kvpilot/fleet_double.py)."""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
import threading
import time

import pytest
from prometheus_client import generate_latest
from sqlalchemy import func, select

from collector.clock import VirtualClock
from detectors.registry import Detection
from kvpilot.runtime import service as service_module
from store import repo
from store.db import transaction
from store.models import DecisionRow, RollupRow
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks


@pytest.fixture
def db(tmp_path) -> tuple[str, object]:
    folder = tmp_path / "data"
    folder.mkdir()
    return f"sqlite:///{folder / 'kvpilot.db'}", folder


async def test_ticks_decide_detect_persist_and_publish(db) -> None:
    url, _ = db
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, xid=79)
    capacity = {"scaler": {"default": {"capacity_rps": 2.5}}}
    service, restored, timer = make_service(url, clock, fleet, overrides=capacity)
    assert restored.findings == []
    assert not service.health().first_tick_done  # not ready before a complete tick
    await service.start(restored)
    await run_ticks(service, timer, 4)
    await until(lambda: service.writer.pending == 0, what="writes flushed")
    snap = service.snapshot()
    assert snap is not None
    assert service.health().first_tick_done
    assert set(snap.decisions) == {"llm/chat"}
    assert [f.kind for f in snap.findings] == ["stuck_gpu"]  # XID 79 opened after its hysteresis
    assert snap.kv_time_to_exhaustion[("llm/chat", "chat-0")] == math.inf  # known usage, not filling
    with transaction(service.sessions) as s:
        assert [f.kind for f in repo.open_findings(session=s)] == ["stuck_gpu"]
        assert repo.latest_decisions(session=s)["llm/chat"].deployment == "llm/chat"
        assert repo.load_rollups(session=s, deployment="llm/chat")[0].values["arrival_rate"] is not None
        assert [d.key for d in repo.list_deployments(session=s).items] == ["llm/chat"]
        cap = repo.get_capacity(session=s, deployment="llm/chat")
        assert cap is not None
        assert (cap.requests_per_s, cap.source) == (pytest.approx(2.5), "configured")
    text = generate_latest(service.registry).decode()
    # the GPU's finding names the deployment and replica it serves (its evidence), not only the GPU
    finding = 'kvpilot_finding_active{deployment="llm/chat",gpu="GPU-0",kind="stuck_gpu",node="n0",replica="chat-0"'
    assert finding in text
    assert "kvpilot_store_up 1.0" in text
    assert "kvpilot_loop_tick_seconds_count 4.0" in text  # one observation per tick
    service.stop.set()
    await service.wait()


async def test_unchanged_decisions_are_not_stored_every_tick(db) -> None:
    url, _ = db
    clock = VirtualClock(START)
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock))
    await service.start(restored)
    await run_ticks(service, timer, 30)  # 150 s of ticks every 5 s
    service.stop.set()
    await service.wait()
    with transaction(service.sessions) as s:
        stored = s.scalar(select(func.count()).select_from(DecisionRow))
    assert stored is not None
    assert 2 <= stored < 30  # changes and a once-a-minute heartbeat, not 31 rows


async def test_store_outage_keeps_deciding_buffers_and_catches_up(db) -> None:
    url, folder = db
    clock = VirtualClock(START)
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock))
    await service.start(restored)
    await run_ticks(service, timer, 2)
    await until(lambda: service.writer.pending == 0, what="first writes flushed")
    # The store goes away: its folder is replaced by a file, so the database cannot be opened.
    hidden = folder.with_name("hidden")
    folder.rename(hidden)
    folder.write_text("not a folder")
    decided_before = service.snapshot().decisions["llm/chat"].timestamp
    await run_ticks(service, timer, 5)
    await until(lambda: not service.writer.up, what="the outage noticed")
    health = service.health()
    assert service.snapshot().decisions["llm/chat"].timestamp > decided_before  # still deciding
    assert health.store_pending_writes > 0
    assert health.store_last_error
    text = generate_latest(service.registry).decode()
    assert "kvpilot_store_up 0.0" in text
    assert f"kvpilot_store_pending_writes {float(health.store_pending_writes)}" in text
    # The store comes back: everything buffered is written, in order, and the service reports it.
    folder.unlink()
    hidden.rename(folder)
    await run_ticks(service, timer, 1)
    await until(lambda: service.writer.up and service.writer.pending == 0, what="caught up")
    with transaction(service.sessions) as s:
        minutes = s.scalar(select(func.count()).select_from(RollupRow))
        samples = s.scalar(select(func.sum(RollupRow.samples)))
    assert minutes is not None
    assert samples == service.loop.tick_count  # every tick's roll-up landed, none lost
    service.stop.set()
    await service.wait()


async def test_bounded_buffer_drops_oldest_and_counts(db) -> None:
    url, folder = db
    clock = VirtualClock(START)
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock))
    service.writer._max = 5
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    await service.start(restored)
    await run_ticks(service, timer, 5)
    await until(lambda: service.writer.dropped_total > 0, what="drops")
    assert service.writer.pending == 5
    assert "kvpilot_store_dropped_writes_total" in generate_latest(service.registry).decode()
    service.stop.set()
    await service.wait()


async def test_sigterm_abandons_the_tick_in_progress_and_flushes_the_ticks_before(db, caplog) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime.service")
    url, _ = db
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)
    service, restored, timer = make_service(url, clock, fleet)
    await service.start(restored)
    await run_ticks(service, timer, 1)
    fleet.gate = asyncio.Event()  # never opened: a collection that would take as long as it likes
    fleet.started.clear()
    await timer.advance(service.interval_s)
    await until(fleet.started.is_set, what="the next tick collecting")
    service.stop.set()  # SIGTERM arrives mid-tick
    await asyncio.wait_for(service.wait(), 5.0)
    assert service.loop.tick_count == 1  # the tick in progress was abandoned, not finished
    assert "the tick in progress was abandoned in its collect stage" in caplog.text
    assert service.writer.pending == 0
    with transaction(service.sessions) as s:
        assert s.scalar(select(func.sum(RollupRow.samples))) == 1  # the first tick's writes are in the store
        assert s.scalar(select(func.count()).select_from(DecisionRow)) == 1


class _BlockingPlanner:
    """The real planner, whose ``decide`` waits for ``release`` once ``block`` is set (a long stage in a thread)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.block = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def decide(self, *args: object, **kwargs: object) -> object:
        if self.block:
            self.entered.set()
            self.release.wait(30)
        return self.inner.decide(*args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_sigterm_in_a_stage_running_in_a_thread_stores_nothing_of_that_tick(db, caplog) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime.service")
    url, _ = db
    clock = VirtualClock(START)
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock))
    planner = _BlockingPlanner(service.loop.planner)
    service.loop.planner = planner
    await service.start(restored)
    await run_ticks(service, timer, 1)
    planner.block = True
    await timer.advance(service.interval_s)
    assert await asyncio.to_thread(planner.entered.wait, 10)
    t0 = time.monotonic()
    service.stop.set()
    try:
        await asyncio.wait_for(service.wait(), 5.0)
        assert time.monotonic() - t0 < 3.0  # not waiting for the decide stage to return
    finally:
        planner.release.set()
    assert service.loop.tick_count == 1
    assert "abandoned in its decide stage" in caplog.text
    with transaction(service.sessions) as s:
        assert s.scalar(select(func.sum(RollupRow.samples))) == 1  # nothing of the abandoned tick stored
        assert s.scalar(select(func.count()).select_from(DecisionRow)) == 1  # the first tick's decision stays


async def test_restart_restores_findings_decisions_and_history(db) -> None:
    url, _ = db
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, xid=79)
    first, restored, timer = make_service(url, clock, fleet)
    await first.start(restored)
    await run_ticks(first, timer, 30)
    await until(lambda: first.writer.pending == 0, what="flushed")
    open_before = [f.id for f in first.snapshot().findings]
    decision_before = first.snapshot().decisions["llm/chat"]
    for t in first.tasks:  # SIGKILL: no shutdown path runs
        t.cancel()
    await asyncio.gather(*first.tasks, return_exceptions=True)

    clock.advance(7)
    second, restored, timer = make_service(url, clock, fleet)
    assert [f.id for f in restored.findings] == open_before
    assert restored.decisions["llm/chat"].desired_replicas == decision_before.desired_replicas
    assert len(restored.rollups) >= 2  # per-minute history for the forecaster
    await second.start(restored)
    forecaster = second.loop.planner.planner_for("llm/chat").forecaster
    assert forecaster.predict(60).point == pytest.approx(4.0, rel=0.3)  # warm: knows the rate before any tick
    await run_ticks(second, timer, 1)
    # The finding is still open after one tick: restored, not re-detected through hysteresis from scratch.
    assert [f.id for f in second.snapshot().findings] == open_before
    second.stop.set()
    await second.wait()


async def test_a_failing_stage_is_counted_and_the_tick_goes_on(db) -> None:
    url, _ = db
    clock = VirtualClock(START)

    class BrokenDetection(Detection):
        def tick(self, state, *, now):
            raise RuntimeError("detector bug")

    service, restored, timer = make_service(url, clock, ScriptedFleet(clock), detection=BrokenDetection())
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert "llm/chat" in service.snapshot().decisions  # scaling went on
    assert 'kvpilot_loop_stage_errors_total{stage="detect"} 2.0' in generate_latest(service.registry).decode()
    service.stop.set()
    await service.wait()


def test_without_auto_migration_an_old_schema_is_refused(db) -> None:
    from kvpilot.runtime.sources import Sources
    from kvpilot.runtime.targets import StaticTargets
    from kvpilot.runtime.wiring import build_service
    from kvpilot.settings import SettingsError
    from tests.unit.kvpilot.fleet_double import settings_for

    url, _ = db
    settings = settings_for(url, store={"auto_migrate": False})
    static = StaticTargets()
    with pytest.raises(SettingsError, match="kvpilot db upgrade"):
        build_service(settings, Sources(static, static))


async def test_the_store_probe_asks_every_store_probe_every_s_and_readiness_reads_its_answer(db, monkeypatch) -> None:
    # `store.probe_every_s` sets how often the probe asks the store (2 s by default: five probes would take 10 s);
    # the health /readyz serves reads its latest answer, with no tick in between.
    url, _ = db
    clock = VirtualClock(START)
    answers: list[bool] = []
    store_answers = [True]

    def ping(engine: object) -> bool:
        answers.append(store_answers[0])
        return store_answers[0]

    monkeypatch.setattr(service_module, "ping", ping)
    probe_fast = {"store": {"probe_every_s": 0.05}}
    service, restored, _ = make_service(url, clock, ScriptedFleet(clock), overrides=probe_fast)
    await service.start(restored)
    try:
        await until(lambda: len(answers) >= 6, what="the ping at start and five probes", timeout_s=5.0)
        assert service.health().store_up
        store_answers[0] = False
        await until(lambda: not service.health().store_up, what="the failed probe read", timeout_s=5.0)
        assert service.store_problem() == "the store does not answer"
        store_answers[0] = True
        await until(lambda: service.health().store_up, what="the store back", timeout_s=5.0)
    finally:
        service.stop.set()
        await service.wait()
