"""Review G5 (session 20): with sharding the leadership is a ``ShardCoordinator``; an instance on its own SQLite that
holds no shard because the others hold them all was told it "could not hold the Lease ... check RBAC". The coordinator
now says what its rounds read (``SeesLease``): another holder of a shard, or why the API server refused it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NoReturn, cast

import pytest
from kubernetes.client.exceptions import ApiException

from collector.clock import VirtualClock
from kvpilot.runtime.lease import Leases
from kvpilot.runtime.service import SeesLease
from kvpilot.runtime.shards import ShardCoordinator
from tests.fakekube import FakeKube
from tests.helpers.sqlite_store import migrated
from tests.unit.kvpilot.fleet_double import ScriptedFleet, make_service


def _coordinator(api: Any, clock: VirtualClock, who: str) -> ShardCoordinator:
    return ShardCoordinator(
        api, lease_name="kvpilot", namespace="kv", identity=who, address=f"{who}:9090", shards=2, clock=clock
    )


def _settled(kube: FakeKube, clock: VirtualClock) -> list[ShardCoordinator]:
    """Three instances sharing 2 shards after a few rounds: one of them holds none."""
    coordinators = [_coordinator(Leases(kube.api_client()), clock, f"kvpilot-{i}") for i in range(3)]
    for _ in range(4):
        for c in coordinators:
            c.round()
        clock.advance(1.0)
    return coordinators


class _Forbidden:
    """A Role without coordination.k8s.io leases: every call answers 403."""

    def __getattr__(self, name: str) -> Any:
        def refuse(*args: object, **kwargs: object) -> NoReturn:
            raise ApiException(status=403, reason="Forbidden")

        return refuse


def test_an_instance_holding_no_shard_names_another_holder() -> None:
    clock = VirtualClock(1_700_000_000.0)
    with FakeKube() as kube:
        coordinators = _settled(kube, clock)
        (idle,) = [c for c in coordinators if not c.owned]  # 3 instances, 2 shards: one holds none
        assert isinstance(idle, SeesLease)
        holders = {c.identity for c in coordinators if c.owned}
        assert idle.holder_seen in holders
        assert idle.lease_failure is None
        busy = next(c for c in coordinators if c.owned)
        assert busy.holder_seen in holders - {busy.identity}  # the other holder, never itself


def test_an_instance_refused_by_the_api_server_says_why() -> None:
    clock = VirtualClock(1_700_000_000.0)
    c = _coordinator(cast(Leases, _Forbidden()), clock, "kvpilot-0")
    for _ in range(2):
        c.round()
        clock.advance(1.0)
    assert not c.owned
    assert c.holder_seen is None
    assert c.lease_failure == "HTTP 403 Forbidden"


def test_the_split_warning_of_an_instance_holding_no_shard_names_the_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvpilot.runtime.service")
    clock = VirtualClock(1_700_000_000.0)
    with FakeKube() as kube:
        (idle,) = [c for c in _settled(kube, clock) if not c.owned]
        service, _, _ = make_service(migrated(tmp_path / "kvpilot.db"), clock, ScriptedFleet(clock), leadership=idle)
        service._note_split(clock.now())
        service._note_split(clock.now() + service.split_after_s)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"another replica ({idle.holder_seen}) has held the Lease for ")
    assert "RBAC" not in warning
