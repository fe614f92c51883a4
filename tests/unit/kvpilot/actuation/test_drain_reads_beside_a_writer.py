"""The drain reads of the leader's passes answer while another connection holds a write transaction: another kvpilot
on the store (the old pod of a rolling update, another shard, the API's approval) writing. Each only reads: the budget
count (``Actuation._budget_spent``), the approved drains to execute (``_approved``), the state the worker polls for an
operator's cancel (``_state``), the executing drains at a pass's start (``_requeue_orphans``' read) and the drain map
of ``kvpilot_node_drain_state`` (``Service._refresh_drains``). So they read through the store's read-only unit
(``transaction(reads_only=True)``: on SQLite a deferred BEGIN under PRAGMA query_only) and see the last committed
state. Begun BEGIN IMMEDIATE, each waited the busy timeout (5 s) behind the writer, and the pass or the cancel poll
with it. On PostgreSQL reads never waited for a writer (MVCC); the same tests run there. A hang guard: the bound is
far above a read's time and far below the busy timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.runtime.sources import build
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import load_settings
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.reliability.conftest import Store

NOW = 1_700_000_000.0
GUARD_S = 2.0  # the busy timeout is 5 s


@pytest.fixture
def sessions(store: Store) -> Iterator[sessionmaker[Session]]:
    """The store with one approved drain on n0 (committed before the writer begins)."""
    engine = make_engine(store.url)
    factory = session_factory(engine)
    with transaction(factory) as s:
        row = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=NOW - 60, dry_run=False)
        repo.approve_drain(session=s, action_id=row.id, actor="kvpilot", now=NOW - 50, max_concurrent=2)
    yield factory
    engine.dispose()


@contextmanager
def _writing(url: str) -> Iterator[None]:
    """Another connection (its own engine, as another kvpilot) requests a drain of n1 and holds its transaction open
    (on SQLite the write lock, on PostgreSQL the rail's row lock) until the block ends."""
    writer = make_engine(url)
    try:
        with transaction(session_factory(writer)) as s:
            repo.request_drain(session=s, node="n1", requested_by="operator", now=NOW, dry_run=False)
            s.flush()
            yield
    finally:
        writer.dispose()


def _actuation(sessions: sessionmaker[Session]) -> Actuation:
    clock = VirtualClock(NOW)
    rails = DrainRails(dry_run=False, max_concurrent_nodes=2, budget=5, budget_window_s=3600.0)
    return Actuation(sessions=sessions, clock=clock, rails=rails, drainer=NoClusterDrainer(clock))


def _beside_a_writer(url: str, read: Callable[[], Any]) -> Any:
    with _writing(url):
        start = time.monotonic()
        got = read()
        took = time.monotonic() - start
    assert took < GUARD_S, f"the read took {took:.2f} s beside a writer"
    return got


def test_the_budget_count_reads_beside_a_writer(store: Store, sessions: sessionmaker[Session]) -> None:
    actuation = _actuation(sessions)
    assert _beside_a_writer(store.url, lambda: actuation._budget_spent(NOW, set())) == 1  # n0, approved


def test_the_approved_drains_are_read_beside_a_writer(store: Store, sessions: sessionmaker[Session]) -> None:
    approved = _beside_a_writer(store.url, _actuation(sessions)._approved)
    assert [(node, dry_run, stored) for _id, node, dry_run, _reason, stored in approved] == [("n0", False, None)]


def test_the_cancel_poll_reads_beside_a_writer(store: Store, sessions: sessionmaker[Session]) -> None:
    actuation = _actuation(sessions)
    (action_id, *_rest) = actuation._approved()[0]
    assert _beside_a_writer(store.url, lambda: actuation._state(action_id)) == "approved"


def test_the_executing_drains_are_read_at_start_beside_a_writer(store: Store, sessions: sessionmaker[Session]) -> None:
    actuation = _actuation(sessions)
    _beside_a_writer(store.url, lambda: actuation._requeue_orphans(True))
    assert [a[1] for a in actuation._approved()] == ["n0"]  # nothing was executing: nothing changed


def test_the_drain_map_is_read_beside_a_writer(store: Store, sessions: sessionmaker[Session], tmp_path: Path) -> None:
    settings = load_settings(store={"database_url": store.url}, collector={"discovery": {"kind": "static"}})
    with build(settings) as sources:
        service, _restored = build_service(settings, sources)
    try:
        _beside_a_writer(store.url, lambda: asyncio.run(service._refresh_drains()))
        assert service.node_drains.current() == {"n0": "approved"}
    finally:
        service.engine.dispose()
