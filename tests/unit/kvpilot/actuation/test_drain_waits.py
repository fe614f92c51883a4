"""A drain told to wait is not retried, nor audited, every pass (review G, session 18): the API server asking to wait
(429/503 with Retry-After, longer than a call may take) put it back to approved and the worker tried it again at its
next pass, each tick, writing its steps each time; a request the store's rail held back logged it every pass. Now it
waits a backoff (5 s doubling to 300 s, at least the Retry-After) and writes its steps once per change; the wait is
kept in the drain's row, so a restart or the next Lease holder honours it (session 20, below).
Real store (SQLite; the session 20 tests PostgreSQL too), the real NodeDrainer through the official client against the
fake API server."""

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
from kvpilot.actuation import (
    BUSY_NOT_BEFORE,
    BUSY_TRIES,
    BUSY_WAIT_S,
    Actuation,
    NoClusterDrainer,
    _forget_wait,
    _stored_wait,
)
from kvpilot.actuation.drain import NodeDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import DrainActionRow
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.fakekube.store import ApiError, throttled
from tests.helpers.clocks import SteppingClock
from tests.helpers.drains import admin_approved
from tests.helpers.sqlite_store import migrated
from tests.reliability.conftest import Store


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


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0])
async def test_a_clock_step_neither_holds_nor_frees_a_drain_told_to_wait(
    tmp_path: Path, kube: FakeKube, step_s: float
) -> None:
    # The API server asks for 30 s; NTP steps the wall clock within them. The wait ran on wall time in the worker's
    # memory: a step back held the drain for the hour more, a step ahead had it tried at once, against the wait.
    kube.intercept = lambda method, path: (
        ApiError(429, "TooManyRequests", "too many requests", retry_after_s=30) if path == NODE else None
    )
    sessions = _sessions(tmp_path)
    clock = SteppingClock(1000.0)
    config = client.Configuration()
    config.host, config.retries = kube.url, False
    api = client.ApiClient(config)
    try:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=clock, request_timeout_s=2.0)
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.05)
        action_id = admin_approved(sessions, "n0", clock.now())
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        reads = kube.requests.count(("GET", NODE))
        clock.step(step_s)
        clock.advance(20.0)  # within the wait
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert kube.requests.count(("GET", NODE)) == reads  # a step ahead had it tried here
        kube.intercept = None
        clock.advance(11.0)  # past the wait
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert _state(sessions, action_id) == "done"  # a step back held it for the hour
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


# -- the wait kept across a restart and a change of Lease holder (session 20) ---------------------------------------
# The backoff lived in the drain worker's memory only, so a restarted kvpilot (or the next holder) tried the drain
# again at once, as often as it restarted, against an API server that had asked for room. The wait is stored in the
# drain's row (its evidence, no schema change) and a fresh worker honours it, with the count of tries it had (the
# backoff doubles on from there). SQLite and a real PostgreSQL.

NODE = "/api/v1/nodes/n0"


@pytest.fixture
def core(kube: FakeKube) -> Iterator[client.CoreV1Api]:
    config = client.Configuration()
    config.host, config.retries = kube.url, False  # as kvpilot run builds it: urllib3 would obey the Retry-After
    with client.ApiClient(config) as api:
        yield client.CoreV1Api(api)


def _worker(url: str, clock: VirtualClock, core: client.CoreV1Api) -> tuple[Actuation, sessionmaker[Session]]:
    """A kvpilot process's drain worker: its own engine on the store (a restart, or the next Lease holder)."""
    sessions = session_factory(make_engine(url))
    drainer = NodeDrainer(core, clock=clock, request_timeout_s=2.0)
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer), sessions


def _row(sessions: sessionmaker[Session], action_id: int) -> tuple[str, dict, list[str]]:
    with transaction(sessions) as s:
        row = repo.get_drain(session=s, action_id=action_id)
        events = [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]
        return row.state, dict(row.evidence or {}), events


async def test_a_restarted_worker_keeps_the_wait_the_api_server_asked_for(
    store: Store, kube: FakeKube, core: client.CoreV1Api
) -> None:
    kube.intercept = lambda method, path: throttled(30) if path == NODE else None  # wait 30 s, longer than a call
    clock = VirtualClock(1000.0)
    first, sessions = _worker(store.url, clock, core)
    action_id = admin_approved(sessions, "n0", clock.now())
    await asyncio.wait_for(first.execute_approved(asyncio.Event()), 10)
    state, evidence, events = _row(sessions, action_id)
    assert state == "approved"
    assert events[-1].endswith("(try 1; next try in 30 s)"), events
    assert (evidence[BUSY_NOT_BEFORE], evidence[BUSY_TRIES]) == (1030.0, 1)
    reads = kube.requests.count(("GET", NODE))

    for _ in range(3):  # restarts within the wait (a crash loop, a rolling update, a new Lease holder)
        clock.advance(5.0)
        restarted, _ = _worker(store.url, clock, core)
        await asyncio.wait_for(restarted.execute_approved(asyncio.Event()), 10)
    assert kube.requests.count(("GET", NODE)) == reads  # not tried: before, each restart tried it at once
    assert _row(sessions, action_id)[2] == events  # nor audited

    clock.advance(20.0)  # past the wait: the next worker tries it, counting on from the stored try
    later, _ = _worker(store.url, clock, core)
    await asyncio.wait_for(later.execute_approved(asyncio.Event()), 10)
    assert kube.requests.count(("GET", NODE)) > reads
    state, evidence, events = _row(sessions, action_id)
    assert events[-1].endswith("(try 2; next try in 30 s)"), events
    assert (evidence[BUSY_NOT_BEFORE], evidence[BUSY_TRIES]) == (1065.0, 2)

    kube.intercept = None  # room again: the drain goes on, and its row keeps no wait
    clock.advance(31.0)
    await asyncio.wait_for(later.execute_approved(asyncio.Event()), 10)
    state, evidence, _ = _row(sessions, action_id)
    assert state == "done"
    assert BUSY_NOT_BEFORE not in evidence
    assert BUSY_TRIES not in evidence


@pytest.mark.parametrize(
    ("evidence", "stored"),
    [
        ({BUSY_NOT_BEFORE: 1030.0, BUSY_TRIES: 2, "finding_ids": "f1"}, (1030.0, 2)),
        ({BUSY_NOT_BEFORE: 1030, BUSY_TRIES: 0}, (1030.0, 1)),
        ({"finding_ids": "f1"}, None),  # never told to wait
        ({BUSY_NOT_BEFORE: "soon", BUSY_TRIES: 2}, None),  # unreadable: tried as before, not stuck
        ({BUSY_NOT_BEFORE: True, BUSY_TRIES: 2}, None),
        ({BUSY_NOT_BEFORE: 1030.0}, None),
        (None, None),
    ],
)
def test_a_stored_wait_is_read_only_when_whole(evidence: dict | None, stored: tuple[float, int] | None) -> None:
    row = DrainActionRow(node="n0", state="approved", evidence=evidence)
    assert _stored_wait(row) == stored
    _forget_wait(row)
    assert BUSY_NOT_BEFORE not in (row.evidence or {})
    assert BUSY_TRIES not in (row.evidence or {})
    assert (row.evidence or {}).get("finding_ids") == (evidence or {}).get("finding_ids")  # the rest is kept


async def test_a_wait_stored_on_a_clock_an_hour_ahead_delays_the_drain_one_wait_not_the_hour(
    store: Store, kube: FakeKube, core: client.CoreV1Api
) -> None:
    """Review G7 (session 20): the stored end is the writer's wall clock plus the wait; another Lease holder's clock
    running an hour ahead (or ours stepped back an hour since) wrote an end an hour away. Read at our now, the end is
    clamped to now plus the wait asked, so the drain is tried after one wait, not after the hour."""
    kube.intercept = lambda method, path: throttled(30) if path == NODE else None
    ahead = VirtualClock(1000.0 + 3600.0)  # the holder that wrote the wait
    first, sessions = _worker(store.url, ahead, core)
    action_id = admin_approved(sessions, "n0", ahead.now())
    await asyncio.wait_for(first.execute_approved(asyncio.Event()), 10)
    _, evidence, _ = _row(sessions, action_id)
    assert evidence[BUSY_NOT_BEFORE] == 4630.0
    reads = kube.requests.count(("GET", NODE))

    ours = VirtualClock(1000.0)  # the next holder, an hour behind the writer
    later, _ = _worker(store.url, ours, core)
    await asyncio.wait_for(later.execute_approved(asyncio.Event()), 10)
    assert kube.requests.count(("GET", NODE)) == reads  # within the wait: not tried
    ours.advance(31.0)
    await asyncio.wait_for(later.execute_approved(asyncio.Event()), 10)
    assert kube.requests.count(("GET", NODE)) > reads  # tried after one wait (it waited the hour before)


@pytest.mark.parametrize(
    ("evidence", "end"),
    [
        ({BUSY_NOT_BEFORE: 4630.0, BUSY_TRIES: 1, BUSY_WAIT_S: 30.0}, 1030.0),  # an hour ahead: one wait from now
        ({BUSY_NOT_BEFORE: 1010.0, BUSY_TRIES: 1, BUSY_WAIT_S: 30.0}, 1010.0),  # within the wait: as stored
        ({BUSY_NOT_BEFORE: 9e9, BUSY_TRIES: 1}, 1300.0),  # no wait stored (older rows): BUSY_MAX_S at most
        ({BUSY_NOT_BEFORE: float("inf"), BUSY_TRIES: 1, BUSY_WAIT_S: 30.0}, 1300.0),
        ({BUSY_NOT_BEFORE: 4630.0, BUSY_TRIES: 1, BUSY_WAIT_S: "x"}, 1300.0),
    ],
)
def test_a_stored_end_is_clamped_to_now_plus_its_wait(evidence: dict, end: float) -> None:
    stored = _stored_wait(DrainActionRow(node="n0", state="approved", evidence=evidence), now=1000.0)
    assert stored == (end, 1)
