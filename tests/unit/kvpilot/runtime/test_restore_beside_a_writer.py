"""What kvpilot reads from the store at start (``restore``) and when it takes a shard (``wiring._latest_decisions``)
is read while another connection holds a write transaction: another kvpilot on the store (the old pod of a rolling
update, another shard) writing its tick. Both only read, so on SQLite they begin deferred (store.db.READS_ONLY) and
read the last committed state. Begun BEGIN IMMEDIATE, each waited the busy timeout (5 s): the restore then started
without history (empty findings, decisions and warm-start rates) and the takeover read failed. A hang guard: the
bound is far above a read's time and far below the busy timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding, Severity, Subject
from kvpilot.runtime.restore import restore
from kvpilot.runtime.wiring import _latest_decisions
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.helpers.sqlite_store import migrated

NOW = 1_700_000_000.0
GUARD_S = 2.0  # the busy timeout is 5 s
DECISION = Decision("llm/chat", NOW - 60, 2, 2, 3, 1, "predictive", "forecast rises", 3, 2, {"arrival_rate": 4.0})
FINDING = Finding(
    "stuck_gpu",
    Severity.CRITICAL,
    Subject(deployment="llm/chat", node="node-0", gpu="GPU-0"),
    NOW - 60,
    "XID 79 on node-0 GPU-0",
    {"xid": 79.0},
    "drain_node",
)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return migrated(tmp_path / "kvpilot.db")


@pytest.fixture
def sessions(url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(url)
    factory = session_factory(engine)
    with transaction(factory) as s:
        repo.upsert_findings(session=s, active=[FINDING], now=NOW - 60)
        repo.record_decision(session=s, decision=DECISION)
        repo.record_rollup(session=s, deployment="llm/chat", t=NOW - 120, signals={"arrival_rate": 3.0})
    yield factory
    engine.dispose()


@contextmanager
def _writing(url: str) -> Iterator[None]:
    """Another connection (its own engine, as another kvpilot) holds the write lock until the block ends."""
    writer = make_engine(url)
    try:
        with transaction(session_factory(writer)) as s:
            repo.record_decision(session=s, decision=replace(DECISION, timestamp=NOW))
            s.flush()  # the write lock held until the commit
            yield
    finally:
        writer.dispose()


def test_the_restore_at_start_reads_beside_a_writer(url: str, sessions: sessionmaker[Session]) -> None:
    with _writing(url):
        start = time.monotonic()
        restored = restore(sessions, now=NOW, history_s=3600.0)
        took = time.monotonic() - start
    assert took < GUARD_S, f"restore took {took:.2f} s beside a writer"
    assert [f.id for f in restored.findings] == [FINDING.id]
    assert restored.decisions["llm/chat"].timestamp == DECISION.timestamp  # the last committed state
    assert [p.values["arrival_rate"] for p in restored.rollups] == [3.0]


def test_a_takeover_reads_the_latest_decisions_beside_a_writer(url: str, sessions: sessionmaker[Session]) -> None:
    with _writing(url):
        start = time.monotonic()
        decisions = _latest_decisions(sessions)
        took = time.monotonic() - start
    assert took < GUARD_S, f"the takeover's read took {took:.2f} s beside a writer"
    assert decisions["llm/chat"].timestamp == DECISION.timestamp
