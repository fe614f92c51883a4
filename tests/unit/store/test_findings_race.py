"""Two instances that read one node's GPUs open its finding in the same moment: both write it, neither write fails.

Each read the finding's row as missing and inserted it; the second INSERT lost on the primary key, and the store
writer dropped that instance's whole findings write for the tick as a bad row (counted as a lost write, logged as an
error): one in two rounds when their ticks coincided, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding, Severity, Subject
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import FindingRow
from store.repo.findings import Reporter
from tests.reliability.conftest import Store

ROUNDS = 20


@pytest.fixture
def url(store: Store) -> str:
    return store.url


def _xid(gpu: str, severity: Severity, summary: str) -> Finding:
    return Finding(
        "gpu_xid", severity, Subject(node="gpu-node-1", gpu=gpu), 100.0, summary, {"xid": 79.0}, "drain_node"
    )


def test_two_instances_opening_one_finding_at_once_both_succeed(url: str) -> None:
    engines = [make_engine(url), make_engine(url)]
    sessions: list[sessionmaker[Session]] = [session_factory(e) for e in engines]
    views = [(Severity.CRITICAL, "xid 79, its replica hangs"), (Severity.WARNING, "xid 79")]
    reporters = [Reporter("kvpilot-0", 30.0), Reporter("kvpilot-1", 30.0)]
    errors: list[str] = []
    start = threading.Barrier(2)

    def instance(i: int) -> None:
        for r in range(ROUNDS):
            active = [_xid(f"GPU-{k}", *views[i]) for k in range(r + 1)]  # one more GPU each round, the rest stay
            start.wait()
            try:
                with transaction(sessions[i]) as s:
                    repo.upsert_findings(session=s, active=active, now=200.0 + r, reporter=reporters[i])
            except Exception as e:  # the assertion below shows which
                errors.append(f"round {r}, instance {i}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")

    threads = [threading.Thread(target=instance, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with transaction(sessions[0]) as s:
        rows = list(s.scalars(select(FindingRow).order_by(FindingRow.gpu)))
    for e in engines:
        e.dispose()
    assert errors == []  # was about ROUNDS / 2 IntegrityErrors (duplicate key)
    assert len(rows) == ROUNDS
    for row in rows:
        assert row.state == "open"
        # Whichever wrote first, the more severe view holds (store.repo.findings._holds), with its summary and action.
        assert (row.severity, row.summary, row.action) == ("critical", "xid 79, its replica hangs", "drain_node")
        assert row.evidence["xid"] == 79.0


def test_a_new_finding_alone_is_stored_with_its_view(url: str) -> None:
    engine = make_engine(url)
    sessions = session_factory(engine)
    with transaction(sessions) as s:
        repo.upsert_findings(session=s, active=[_xid("GPU-0", Severity.WARNING, "xid 79")], now=150.0)
    with transaction(sessions) as s:
        (row,) = s.scalars(select(FindingRow))
        assert (row.kind, row.node, row.gpu, row.since, row.last_seen) == (
            "gpu_xid",
            "gpu-node-1",
            "GPU-0",
            100.0,
            150.0,
        )
        assert (row.severity, row.summary, row.action, row.state) == ("warning", "xid 79", "drain_node", "open")
    engine.dispose()
