"""A stored JSON value nested past the JSON decoder's recursion (~1,000 levels; kvpilot writes flat objects, a hand or
another program may not) costs only itself (hostile input round 7, session 22): it reads as null. Before, the
RecursionError of the decode failed the whole query it came in: every start of kvpilot (restore reads the open
findings and the latest decisions), the findings page, the drain circuit breaker's read of the instances' nodes."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from kvpilot.runtime.restore import restore
from store.db import transaction
from store.repo.fleet import live_instance_nodes
from tests.unit.api.conftest import FakeRuntime, auth

DEEP = "[" * 5000 + "]" * 5000
FINDING = (
    "INSERT INTO findings (id, kind, severity, deployment, replica, node, gpu, since, summary, evidence, action, "
    "state, last_seen) VALUES (:id, 'stuck_gpu', 'warning', 'llm/deep', '', 'n9', :gpu, :now, 'deep', :evidence, "
    "'none', 'open', :now)"
)


def store_rows(runtime: FakeRuntime, now: float, *, evidence: str, value: str, ids: str = "d") -> None:
    """Two stuck_gpu findings of llm/deep (``<ids>1`` on GPU-8 with ``evidence``, ``<ids>2`` on GPU-9 readable), a
    decision whose forecast is ``value``, instance kv-1 whose nodes are ``value`` beside kv-2's readable ones."""
    with transaction(runtime.sessions) as s:
        for fid, gpu, held in ((f"{ids}1", "GPU-8", evidence), (f"{ids}2", "GPU-9", '{"xid": 79}')):
            s.execute(text(FINDING), {"id": f"00000000000000{fid}", "gpu": gpu, "evidence": held, "now": now})
        s.execute(
            text(
                "INSERT INTO decisions (deployment, timestamp, current_replicas, ready_replicas, desired_replicas, "
                "warm_pool, reason, message, forecast) VALUES ('llm/deep', :now, 1, 1, 2, 0, 'reactive', 'x', "
                ":forecast)"
            ),
            {"now": now, "forecast": value},
        )
        s.execute(
            text("INSERT INTO instance_nodes (instance, nodes, refreshed_at) VALUES ('kv-1', :nodes, :now)"),
            {"nodes": value, "now": now},
        )
        s.execute(
            text("INSERT INTO instance_nodes (instance, nodes, refreshed_at) VALUES ('kv-2', '[\"n2\"]', :now)"),
            {"now": now},
        )


def _store_deep_rows(runtime: FakeRuntime, now: float) -> None:
    store_rows(runtime, now, evidence='{"deep": ' + DEEP + ', "xid": 79}', value=DEEP)


def test_a_start_reads_past_a_row_nested_too_deep(runtime: FakeRuntime, caplog: pytest.LogCaptureFixture) -> None:
    now = time.time()
    _store_deep_rows(runtime, now)
    with caplog.at_level(logging.WARNING, logger="store.db"):
        restored = restore(runtime.sessions, now=now, history_s=3600)
    found = {f.subject.gpu: f.evidence for f in restored.findings if f.subject.deployment == "llm/deep"}
    assert found == {"GPU-8": {}, "GPU-9": {"xid": 79.0}}  # the row too deep resumed, its evidence read as none
    assert restored.decisions["llm/deep"].forecast == {}  # the row itself read, its forecast as none
    assert "nested" in caplog.text  # said


def test_the_pages_and_the_breaker_read_past_it(runtime: FakeRuntime, client: TestClient) -> None:
    now = time.time()
    _store_deep_rows(runtime, now)
    page = client.get("/v1/findings", params={"limit": 1000}, headers=auth("r" * 24))
    assert page.status_code == 200
    shown = {f["id"]: f for f in page.json()["items"]}
    assert shown["00000000000000d1"]["evidence"] == {}
    assert shown["00000000000000d2"]["evidence"] == {"xid": 79}
    assert client.get("/v1/findings/00000000000000d1", headers=auth("r" * 24)).status_code == 200
    assert client.get("/v1/decisions", headers=auth("r" * 24)).status_code == 200
    with transaction(runtime.sessions) as s:
        assert live_instance_nodes(session=s, now=now, stale_after_s=60) == {"kv-1": set(), "kv-2": {"n2"}}
