"""HA replicas on SQLite (review G, F2): each replica's store is a file of its own pod, and only the Lease holder
writes findings and proposes drains there. A replica that holds no Lease says so instead of answering from an empty
store: /v1/findings and /v1/drains answer 503 naming the fix (a drain approved there would never reach the holder),
its log warns once it has followed another holder for four lease periods (one replica, deploy/base's default, is
only told at start, at INFO), and /metrics exports kvpilot_store_sqlite for the alert that counts such pods. With
PostgreSQL (one store for all) and without a Lease (one process) nothing changes.

The real service (``build_service``) on a real store, its API through the app `kvpilot run` serves."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.auth import TokenAuth
from api.main import create_app
from collector.clock import VirtualClock
from tests.helpers.sqlite_store import migrated
from tests.reliability.conftest import Store, postgres, store  # noqa: F401
from tests.unit.kvpilot.fleet_double import ScriptedFleet, make_service, run_ticks

ADMIN = "a" * 24
A = {"Authorization": f"Bearer {ADMIN}"}
HOLDER_ONLY = (
    ("GET", "/v1/findings"),
    ("GET", "/v1/findings/0123456789abcdef"),
    ("GET", "/v1/drains"),
    ("GET", "/v1/drains/1"),
    ("POST", "/v1/drains"),
    ("POST", "/v1/drains/1/approve"),
    ("POST", "/v1/drains/1/cancel"),
    ("POST", "/v1/targets"),  # a target added to a follower's own store would be scraped by that follower alone
    ("DELETE", "/v1/targets?url=http://10.0.0.9:8000/metrics"),
)


@dataclass
class Held:
    """A Lease this replica holds or not (``LeaseElector.leader``), and what its last read saw of it
    (``LeaseElector.holder_seen``, ``lease_failure``)."""

    leader: bool
    holder_seen: str | None = None
    lease_failure: str | None = None


def _client(db: Store, leadership: Held | None) -> tuple[TestClient, object]:
    clock = VirtualClock(1_700_000_000.0)
    service, _, _ = make_service(db.url, clock, ScriptedFleet(clock), leadership=leadership)
    return TestClient(create_app(service, TokenAuth((), (ADMIN,), anonymous_read=False))), service


def _ask(client: TestClient, method: str, path: str) -> int:
    body = {"/v1/drains": {"node": "node-0", "reason": "xid 79"}, "/v1/targets": {"url": "http://10.0.0.9:8000/m"}}
    return client.request(method, path, headers=A, json=body.get(path, {}) if method == "POST" else None).status_code


def _sqlite_gauge(client: TestClient) -> str:
    page = client.get("/metrics", headers=A).text
    return next(line for line in page.splitlines() if line.startswith("kvpilot_store_sqlite "))


def test_a_follower_on_its_own_sqlite_refuses_what_only_the_holder_has(
    store: Store,  # noqa: F811 (the reliability suite's fixture)
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime.service")
    client, _ = _client(store, Held(leader=False))
    if store.backend == "postgresql":  # one store for every replica: the follower reads the holder's rows
        assert all(_ask(client, m, p) in {200, 201, 204, 404} for m, p in HOLDER_ONLY)
        assert not [r for r in caplog.records if "KVPILOT_DATABASE_URL" in r.getMessage()]
        assert _sqlite_gauge(client) == "kvpilot_store_sqlite 0.0"
        return
    # said once at start, naming the setting that fixes it (INFO: one replica is right on SQLite)
    (note,) = [r for r in caplog.records if "KVPILOT_DATABASE_URL" in r.getMessage()]
    assert note.levelno == logging.INFO
    for method, path in HOLDER_ONLY:
        r = client.request(
            method, path, headers=A, json={"url": "http://10.0.0.9:8000/m"} if method == "POST" else None
        )
        assert r.status_code == 503, (method, path, r.status_code)
        assert r.headers["retry-after"] == "1"
        assert "does not hold the Lease" in r.json()["detail"]
        assert "KVPILOT_DATABASE_URL" in r.json()["detail"]
    assert client.get("/v1/findings").status_code == 401  # authentication first: no reason told to anyone
    # what every replica computes itself is still served, and the replica stays ready (a rolling update waits for
    # its new pod to be ready while the old holder keeps the Lease: a follower never ready would never finish one)
    assert client.get("/v1/decisions", headers=A).status_code == 200
    assert client.get("/readyz").json()["checks"]["store_reachable"] is True
    assert _sqlite_gauge(client) == "kvpilot_store_sqlite 1.0"


def test_the_holder_and_a_lone_process_answer_from_their_sqlite(
    store: Store,  # noqa: F811 (the reliability suite's fixture)
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.runtime.service")
    for leadership in (Held(leader=True), None):
        client, _ = _client(store, leadership)
        assert all(_ask(client, m, p) in {200, 201, 204, 404, 409} for m, p in HOLDER_ONLY), leadership
    # the holder on SQLite is told at start (its followers would refuse); one process without a Lease is not
    assert len([r for r in caplog.records if "KVPILOT_DATABASE_URL" in r.getMessage()]) == (
        1 if store.backend == "sqlite" else 0
    )


def test_the_holder_losing_the_lease_starts_refusing(store: Store) -> None:  # noqa: F811
    held = Held(leader=True)
    client, _ = _client(store, held)
    assert client.get("/v1/findings", headers=A).status_code == 200
    held.leader = False
    assert client.get("/v1/findings", headers=A).status_code == (503 if store.backend == "sqlite" else 200)
    held.leader = True
    assert client.get("/v1/findings", headers=A).status_code == 200


async def test_a_replica_that_follows_for_four_lease_periods_on_its_own_sqlite_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvpilot.runtime.service")
    clock = VirtualClock(1_700_000_000.0)
    held = Held(leader=False, holder_seen="kvpilot-7d9f-0")
    url = migrated(tmp_path / "kvpilot.db")
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock), leadership=held)
    assert service.split_after_s == 60.0  # 4 x ha.lease_duration_s (15 s)
    await service.start(restored)
    try:
        await run_ticks(service, timer, 12)  # 55 s of following: a rolling update's new pod, not yet a split
        assert not caplog.records
        held.leader = True  # it took the Lease: the count starts again when it follows again
        await run_ticks(service, timer, 2)
        held.leader = False
        await run_ticks(service, timer, 12)
        assert not caplog.records
        await run_ticks(service, timer, 20)  # past 60 s, and long after: said once
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "another replica (kvpilot-7d9f-0) has held the Lease for 60 s" in warning
        assert "KVPILOT_DATABASE_URL" in warning
    finally:
        service.stop.set()
        await service.wait()


@pytest.mark.parametrize(
    ("failure", "why"),
    [
        ("HTTP 403 Forbidden", "(HTTP 403 Forbidden)"),  # no RBAC on leases
        ("[Errno 111] Connection refused", "([Errno 111] Connection refused)"),  # the API server away
        (None, "(the last read of the Lease named no other holder)"),
    ],
)
async def test_a_lone_replica_that_cannot_hold_the_lease_says_so_not_that_another_holds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, failure: str | None, why: str
) -> None:
    """Review G F7 (session 19): a replica that never read another holder (its rounds failed) warned that another
    replica held the Lease. It says the Lease could not be held and why; the split warning follows once a read names
    another holder."""
    caplog.set_level(logging.WARNING, logger="kvpilot.runtime.service")
    clock = VirtualClock(1_700_000_000.0)
    held = Held(leader=False, lease_failure=failure)
    url = migrated(tmp_path / "kvpilot.db")
    service, restored, timer = make_service(url, clock, ScriptedFleet(clock), leadership=held)
    await service.start(restored)
    try:
        await run_ticks(service, timer, 20)  # past 60 s: said once
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert f"this replica could not hold the Lease for 60 s {why}" in warning
        assert "another replica" not in warning
        assert "KVPILOT_DATABASE_URL" in warning
        held.holder_seen, held.lease_failure = "kvpilot-7d9f-1", None  # the API server answers: another holds it
        await run_ticks(service, timer, 10)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2
        assert warnings[1].startswith("another replica (kvpilot-7d9f-1) has held the Lease for ")
    finally:
        service.stop.set()
        await service.wait()
