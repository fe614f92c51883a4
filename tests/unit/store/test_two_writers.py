"""Two kvpilots on one store writing the same row in the same moment: neither write fails. An HA pair runs the loop
twice and both persist roll-ups, capacity and sightings; sharded instances that read one node's GPUs open its finding.

Each read the row as missing and inserted it; the second INSERT lost on the primary key, and the store writer dropped
that write as a bad row (an error logged, kvpilot_store_dropped_writes_total + 1): the minute's roll-up sample, the
capacity observation, the deployment's sighting. Ticks of two instances seldom coincide to the millisecond, but
each new minute's roll-up of every deployment is such a first write. A finding's view is refreshed by the loser as any
row it found (``store.repo.findings._holds``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from detectors.finding import Finding, Severity, Subject
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import CapacityProfileRow, DeploymentRow, FindingRow, RollupRow
from store.repo.deployments import SeenDeployment
from store.repo.findings import Reporter
from tests.reliability.conftest import Store

ROUNDS = 20


def _race(url: str, write: Callable[[Session, int, int], None]) -> list[str]:
    """``write(session, instance, round)`` from two instances, each round started at a barrier; the errors."""
    engines = [make_engine(url), make_engine(url)]
    sessions = [session_factory(e) for e in engines]
    errors: list[str] = []
    start = threading.Barrier(2)

    def instance(i: int) -> None:
        for r in range(ROUNDS):
            start.wait()
            try:
                with transaction(sessions[i]) as s:
                    write(s, i, r)
            except Exception as e:  # the assertion shows which
                errors.append(f"round {r}, instance {i}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")

    threads = [threading.Thread(target=instance, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in engines:
        e.dispose()
    return errors


@pytest.fixture
def url(store: Store) -> str:
    return store.url


def test_one_minutes_first_rollup_from_two_instances(url: str) -> None:
    def write(s: Session, i: int, r: int) -> None:
        repo.record_rollup(session=s, deployment="llm/chat", t=60.0 * r, signals={"arrival_rate": 10.0 + 10 * i})

    assert _race(url, write) == []
    with transaction(session_factory(make_engine(url))) as s:
        rows = list(s.scalars(select(RollupRow).order_by(RollupRow.minute)))
    assert len(rows) == ROUNDS
    assert all(row.samples == 2 and row.arrival_rate == pytest.approx(15.0) for row in rows)  # both folded in


def test_a_deployments_first_capacity_from_two_instances(url: str) -> None:
    def write(s: Session, i: int, r: int) -> None:
        repo.upsert_capacity(
            session=s, deployment=f"llm/d{r}", requests_per_s=5.0 + i, tokens_per_s=None, source="observed", now=1.0
        )

    assert _race(url, write) == []
    with transaction(session_factory(make_engine(url))) as s:
        rows = list(s.scalars(select(CapacityProfileRow)))
    assert len(rows) == ROUNDS
    assert all(row.observations == 2 and row.requests_per_s in (5.0, 6.0) for row in rows)


def test_a_deployments_first_sighting_from_two_instances(url: str) -> None:
    def write(s: Session, i: int, r: int) -> None:
        seen = [SeenDeployment(f"llm/d{r}", "vllm", "m"), SeenDeployment(f"llm/only-{i}-{r}", "sglang", None)]
        repo.upsert_deployments(session=s, seen=seen, now=100.0 + i)

    assert _race(url, write) == []
    with transaction(session_factory(make_engine(url))) as s:
        rows = {row.key: row for row in s.scalars(select(DeploymentRow))}
    assert len(rows) == 3 * ROUNDS
    shared = [rows[f"llm/d{r}"] for r in range(ROUNDS)]
    assert all(row.engine == "vllm" and row.first_seen in (100.0, 101.0) for row in shared)
    assert all(row.last_seen in (100.0, 101.0) for row in shared)  # whichever wrote last


def _xid(gpu: str, severity: Severity, summary: str) -> Finding:
    return Finding(
        "gpu_xid", severity, Subject(node="gpu-node-1", gpu=gpu), 100.0, summary, {"xid": 79.0}, "drain_node"
    )


def test_one_findings_opening_from_two_instances(url: str) -> None:
    # Was about one round in two an IntegrityError, and the loser's whole findings write for the tick dropped.
    views = [(Severity.CRITICAL, "xid 79, its replica hangs"), (Severity.WARNING, "xid 79")]
    reporters = [Reporter("kvpilot-0", 30.0), Reporter("kvpilot-1", 30.0)]

    def write(s: Session, i: int, r: int) -> None:
        active = [_xid(f"GPU-{k}", *views[i]) for k in range(r + 1)]  # one more GPU each round, the rest stay
        repo.upsert_findings(session=s, active=active, now=200.0 + r, reporter=reporters[i])

    assert _race(url, write) == []
    with transaction(session_factory(make_engine(url))) as s:
        rows = list(s.scalars(select(FindingRow)))
    assert len(rows) == ROUNDS
    for row in rows:
        assert row.state == "open"
        # Whichever wrote first, the more severe view holds, with its summary and action.
        assert (row.severity, row.summary, row.action) == ("critical", "xid 79, its replica hangs", "drain_node")
        assert row.evidence["xid"] == 79.0


def test_a_new_finding_alone_is_stored_with_its_view(url: str) -> None:
    with transaction(session_factory(make_engine(url))) as s:
        repo.upsert_findings(session=s, active=[_xid("GPU-0", Severity.WARNING, "xid 79")], now=150.0)
    with transaction(session_factory(make_engine(url))) as s:
        (row,) = s.scalars(select(FindingRow))
        assert (row.kind, row.node, row.gpu, row.since, row.last_seen) == (
            "gpu_xid",
            "gpu-node-1",
            "GPU-0",
            100.0,
            150.0,
        )
        assert (row.severity, row.summary, row.action, row.state) == ("warning", "xid 79", "drain_node", "open")
