"""A drain told to wait is not retried, nor audited, every pass (review G, session 18): the API server asking to wait
(429/503 with Retry-After, longer than a call may take) put it back to approved and the worker tried it again at its
next pass, each tick, writing its steps each time; a request the store's rail held back logged it every pass. Now it
waits a backoff (5 s doubling to 300 s, at least the Retry-After) and writes its steps once per change.
Real store (SQLite), the real NodeDrainer through the official client against the fake API server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.actuation.drain import NodeDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.fakekube.store import ApiError
from tests.helpers.drains import admin_approved
from tests.helpers.sqlite_store import migrated


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    return session_factory(make_engine(migrated(tmp_path / "k.db")))


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube()).start()
    try:
        fake.create("nodes", {"metadata": {"name": "n0"}, "spec": {}})
        yield fake
    finally:
        fake.stop()


def _events(sessions: sessionmaker[Session], action_id: int) -> list[str]:
    with transaction(sessions) as s:
        return [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]


def _state(sessions: sessionmaker[Session], action_id: int) -> str:
    with transaction(sessions) as s:
        return repo.get_drain(session=s, action_id=action_id).state


async def test_a_drain_the_api_server_asks_to_wait_backs_off_and_audits_once(tmp_path: Path, kube: FakeKube) -> None:
    def shedding(method: str, path: str) -> ApiError | None:  # API Priority and Fairness: wait 30 s
        if path == "/api/v1/nodes/n0":
            return ApiError(429, "TooManyRequests", "too many requests, please try again later", retry_after_s=30)
        return None

    kube.intercept = shedding
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    config = client.Configuration()
    config.host, config.retries = kube.url, False  # as kvpilot run builds it: urllib3 would obey the Retry-After
    api = client.ApiClient(config)
    try:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=clock, request_timeout_s=2.0)
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.05)
        action_id = admin_approved(sessions, "n0", clock.now())
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        first = _events(sessions, action_id)
        assert _state(sessions, action_id) == "approved"
        assert any(m.startswith("cordon n0: retry read node n0: the API server asks to wait 30 s") for m in first)
        reads = kube.requests.count(("GET", "/api/v1/nodes/n0"))
        for _ in range(20):  # 20 passes (ticks) within the wait: neither tried nor audited
            clock.advance(1.0)
            await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert _events(sessions, action_id) == first  # was 3 more events a pass (executing, the step, requeued)
        assert kube.requests.count(("GET", "/api/v1/nodes/n0")) == reads
        assert first[-1].endswith("(try 1; next try in 30 s)"), first  # the Retry-After, more than the first 5 s
        clock.advance(10.0)  # past the wait: tried once more, the same answer: its steps are not written again
        for _ in range(5):
            await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        second = _events(sessions, action_id)
        assert second[len(first) :] == ["executing", second[-1]]
        assert second[-1].endswith("(try 2; next try in 30 s)")
        kube.intercept = None  # the API server has room again: the drain goes on at its next try
        clock.advance(30.0)
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert _state(sessions, action_id) == "done"
        assert kube.get("nodes", "n0", namespace="")["spec"]["unschedulable"] is True
    finally:
        api.close()


async def test_a_request_the_rail_holds_back_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # require_approval off, one drain at a time: n1's request waits for n0's slot, decided again every pass.
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock),
                    require_approval=False)  # fmt: skip

    def stuck(node: str) -> Finding:
        return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="GPU-1"), 990.0, f"XID 79 on {node}",
                       action="drain_node")  # fmt: skip

    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[stuck("n0")]))
    caplog.set_level(logging.INFO, logger="kvpilot.actuation")
    for tick in range(2, 12):  # the live-drain map read before n0's approval: n1 looks free, the store's rail says no
        await act.after_tick(Snapshot(tick=tick, t=clock.now(), findings=[stuck("n1")]))
    stays = [r.getMessage() for r in caplog.records if "stays requested" in r.getMessage()]
    assert len(stays) == 1, stays  # was one a pass
    assert stays[0].startswith("drain of n1 stays requested:")
