"""The store and the service against a real PostgreSQL (Debian's, started by tests/services/postgres.py):
repository round trips, decision pages by cursor, and the database stopped mid-run then started again."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, func, insert, select, text

import migrations
from collector.clock import VirtualClock
from detectors.finding import Finding, Severity, Subject
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from store.errors import BudgetSpent
from store.models import DecisionRow, RollupRow
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


def _decision_rows(n: int) -> list[dict[str, object]]:
    """``n`` decisions as ticks write them: three deployments at each timestamp."""
    deps = ("a/x", "a/y", "a/z")
    return [
        {
            "deployment": deps[i % 3],
            "timestamp": 1_000.0 + (i // 3) * 5.0,
            "current_replicas": 1,
            "ready_replicas": 1,
            "desired_replicas": 1,
            "warm_pool": 0,
            "reason": "steady",
            "message": f"row {i}",
            "forecast": {},
        }
        for i in range(n)
    ]


def test_decision_pages_by_cursor_read_only_their_rows(url: str) -> None:
    engine = make_engine(url)
    sessions = session_factory(engine)
    opened: list[object] = []
    event.listen(engine, "connect", lambda conn, _record: opened.append(conn))
    with transaction(sessions) as s:
        s.execute(insert(DecisionRow), _decision_rows(30_000))
        s.execute(text("ANALYZE decisions"))
    served: list[str] = []
    for deployment in (None, "a/y"):
        after = None
        for _ in range(25):  # 25 pages of 7: pages end inside a timestamp's ties
            with transaction(sessions) as s:
                page = repo.list_decisions(session=s, deployment=deployment, limit=7, after=after)
            served += [d.message for d in page.items]
            after = page.next_after
        assert after is not None
    newest = [f"row {i}" for i in range(29_999, 29_999 - 175, -1)]  # ids rise with i: ties newest row first
    newest_y = [f"row {i}" for i in range(29_999, 0, -1) if i % 3 == 1][:175]
    assert served == newest + newest_y
    assert len(opened) == 1  # 51 transactions, one pooled connection

    # The plan of the statement a page deep in the list runs: the rows it reads are the page's, not the 30,000 kept.
    run: list[tuple[str, Any]] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, sql, params, *_: run.append((sql, params)))
    with transaction(sessions) as s:
        repo.list_decisions(session=s, limit=7, after=(20_000.0, 12_345))
    (sql, params), *_ = [(q, p) for q, p in run if "FROM decisions" in q]
    with engine.connect() as conn:
        (plan,) = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).scalar_one()

    def nodes(n: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield n
        for child in n.get("Plans", []):
            yield from nodes(child)

    read = [n["Actual Rows"] for n in nodes(plan["Plan"]) if "Scan" in n["Node Type"]]
    assert read, plan
    assert max(read) <= 50, plan  # one timestamp's ties and the next, at most
    engine.dispose()


def test_the_drain_budget_counts_a_still_cordoned_node_once(url: str) -> None:
    # session 19: count_budget_drains adds the nodes kvpilot cordoned that are still cordoned (read by the caller)
    sessions = session_factory(make_engine(url))
    with transaction(sessions) as s:
        a = repo.request_drain(session=s, node="a", requested_by="admin#0", now=10.0, dry_run=False)
        repo.approve_drain(session=s, action_id=a.id, actor="admin#0", now=10.0, max_concurrent=5)
    with transaction(sessions) as s:
        assert repo.count_budget_drains(session=s, since=0.0, dry_run=False, cordoned={"a", "old"}) == 2
        assert repo.count_budget_drains(session=s, since=0.0, dry_run=True, cordoned=()) == 0
        b = repo.request_drain(session=s, node="b", requested_by="admin#0", now=20.0, dry_run=False)
        with pytest.raises(BudgetSpent):
            repo.approve_drain(session=s, action_id=b.id, actor="admin#0", now=20.0, max_concurrent=5, budget=2,
                               cordoned={"old"})  # fmt: skip


def test_the_urls_own_options_are_kept_beside_the_timeouts(postgres: PostgresServer, url: str) -> None:
    # review H (session 19): a URL's ?options= (here a search_path) was silently replaced by kvpilot's timeouts
    own = url + "?options=-c%20search_path%3Dkvp_own%2Cpublic%20-c%20lock_timeout%3D7000"
    engine = make_engine(own, statement_timeout_s=3.0)
    try:
        with engine.connect() as conn:
            got = [conn.execute(text(f"SHOW {name}")).scalar() for name in ("search_path", "statement_timeout")]
            lock = conn.execute(text("SHOW lock_timeout")).scalar()
    finally:
        engine.dispose()
    assert got == ["kvp_own,public", "3s"]
    assert lock == "7s"  # the URL's own setting wins over kvpilot's default
