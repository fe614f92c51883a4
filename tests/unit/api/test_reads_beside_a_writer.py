"""The API's GET routes answer while another connection (the control loop, another kvpilot on the store) holds a
write transaction: on SQLite their unit of work begins deferred (store.db.READS_ONLY), so it reads the last
committed state without waiting for the writer's lock. Begun BEGIN IMMEDIATE (d2d930d), each GET waited the busy
timeout (5 s) and failed. A hang guard: the bound is far above a read's time and far below the busy timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from store import repo
from store.db import make_engine, session_factory, transaction
from tests.unit.api.conftest import DECISION, FINDING, READ, FakeRuntime, auth

R = auth(READ)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/findings",
        f"/v1/findings/{FINDING.id}",
        "/v1/drains",
        "/v1/decisions",
        "/v1/deployments",
        "/v1/deployments/llm/chat",
        "/v1/deployments/llm/chat/history",
    ],
)
def test_a_get_does_not_wait_for_a_writer(client: TestClient, runtime: FakeRuntime, tmp_path: Path, path: str) -> None:
    writer = make_engine(f"sqlite:///{tmp_path / 'api.db'}")
    try:
        with transaction(session_factory(writer)) as s:
            repo.record_decision(session=s, decision=DECISION)
            s.flush()  # the write lock held until the commit
            start = time.monotonic()
            r = client.get(path, headers=R)
            took = time.monotonic() - start
        assert r.status_code == 200, r.text
        assert took < 2.0, f"{path} took {took:.2f} s beside a writer"
    finally:
        writer.dispose()
