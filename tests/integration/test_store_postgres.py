"""The store and the service against a real PostgreSQL (Debian's, started by tests/services/postgres.py):
repository round trips, and the database stopped mid-run then started again."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

import migrations
from collector.clock import VirtualClock
from detectors.finding import Finding, Severity, Subject
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import RollupRow
from tests.helpers.poll import until
from tests.services.postgres import PostgresServer, fresh_database, run_postgres
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with run_postgres() as server:
        yield server


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    url = fresh_database(postgres)
    migrations.upgrade(url)
    return url


def test_round_trips_with_json_and_non_finite_numbers(url: str) -> None:
    engine = make_engine(url)
    sessions = session_factory(engine)
    d = Decision("a/x", 1.0, 1, 1, 2, 0, "reactive", "queue", None, 2, {"arrival_rate": 3.0, "queue": math.nan})
    f = Finding(
        "kv_exhaustion",
        Severity.WARNING,
        Subject(deployment="a/x", replica="x-0"),
        1.0,
        "KV filling",
        {"tte_s": math.inf, "usage": 0.93},
    )
    with transaction(sessions) as s:
        repo.record_decision(session=s, decision=d)
        repo.upsert_findings(session=s, active=[f], now=1.0)
        repo.record_rollup(session=s, deployment="a/x", t=61.0, signals={"arrival_rate": 2.0})
    with transaction(sessions) as s:
        # PostgreSQL's JSON has no NaN/Infinity: unknown numbers are dropped or None, never an error
        assert repo.latest_decisions(session=s)["a/x"].forecast == {"arrival_rate": 3.0}
        assert repo.get_finding(session=s, finding_id=f.id).evidence == {"tte_s": None, "usage": 0.93}
        assert repo.load_rollups(session=s)[0].t == 60.0
    engine.dispose()


async def test_database_stopped_mid_run_then_back(url: str, postgres: PostgresServer) -> None:
    clock = VirtualClock(START)
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock, xid=79))
    await service.start(restored)
    await run_ticks(service, timer, 3)
    await until(lambda: service.writer.pending == 0, what="flushed")
    await asyncio.to_thread(postgres.stop)
    try:
        await run_ticks(service, timer, 4)
        await until(lambda: not service.writer.up, what="outage noticed")
        assert service.health().store_pending_writes > 0
        assert "llm/chat" in service.snapshot().decisions  # still deciding
    finally:
        await asyncio.to_thread(postgres.start)
    await run_ticks(service, timer, 1)
    await until(lambda: service.writer.up and service.writer.pending == 0, what="caught up")
    with transaction(service.sessions) as s:
        assert s.scalar(select(func.sum(RollupRow.samples))) == service.loop.tick_count  # nothing lost
        assert [f.kind for f in repo.open_findings(session=s)] == ["stuck_gpu"]
    service.stop.set()
    await service.wait()
    service.engine.dispose()


async def test_restart_resumes_from_postgres(url: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, xid=79)
    first, restored, timer = make_service(url, clock, fleet)
    await first.start(restored)
    await run_ticks(first, timer, 14)
    await until(lambda: first.writer.pending == 0, what="flushed")
    for t in first.tasks:  # killed: no shutdown path
        t.cancel()
    await asyncio.gather(*first.tasks, return_exceptions=True)
    first.engine.dispose()
    second, restored, _ = make_service(url, clock, fleet)
    assert [f.kind for f in restored.findings] == ["stuck_gpu"]
    assert set(restored.decisions) == {"llm/chat"}
    assert restored.rollups
    second.engine.dispose()
