"""An operator acknowledges a finding while the loop closes it: on PostgreSQL (read committed) the acknowledgement
read the finding open, the loop's close committed, and the row as read was written back - the ended finding read
acknowledged, live, until the next tick closed it again. The acknowledgement is now refused as for a closed one (the
API's 409), and the close stands. SQLite's writers take the write lock at BEGIN, so the two never interleave there."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

import migrations
from detectors.finding import Finding, Severity, Subject
from store import repo
from store.db import make_engine, session_factory, transaction
from store.errors import InvalidTransition
from store.models import FindingRow
from store.repo import findings
from tests.services.postgres import PostgresServer, fresh_database

pytestmark = pytest.mark.integration

XID = Finding(
    "gpu_xid", Severity.CRITICAL, Subject(node="n1", gpu="GPU-0"), 100.0, "xid 79", {"xid": 79.0}, "drain_node"
)


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    url = fresh_database(postgres)
    migrations.upgrade(url)
    return url


def test_a_finding_closed_while_it_is_acknowledged_stays_closed(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(url)
    sessions = session_factory(engine)
    with transaction(sessions) as s:
        repo.upsert_findings(session=s, active=[XID], now=100.0)
    read = findings.get_finding

    def read_then_closed(**kwargs: object) -> FindingRow:
        row = read(**kwargs)  # type: ignore[arg-type]
        # the loop's tick, between the acknowledgement's read and its write: the finding is gone, closed
        loop = threading.Thread(target=_close, args=(sessions,))
        loop.start()
        loop.join(10)
        assert not loop.is_alive()
        return row

    monkeypatch.setattr(findings, "get_finding", read_then_closed)
    with pytest.raises(InvalidTransition), transaction(sessions) as s:
        repo.acknowledge_finding(session=s, finding_id=XID.id, by="admin", note="looking", now=110.0)
    with transaction(sessions) as s:
        row = s.scalars(select(FindingRow)).one()
        assert (row.state, row.closed_at, row.acknowledged_by) == ("closed", 105.0, None)
    engine.dispose()


def _close(sessions: object) -> None:
    with transaction(sessions) as s:  # type: ignore[arg-type]
        repo.upsert_findings(session=s, active=[], now=105.0)
