"""Direct scaling when the deployment was another instance's meanwhile (sharding: its shard moved away and back; HA:
the Lease did): two ``Actuation``s, each with the direct actuator, through the official client against the fake API
server. An instance skipped a count it had applied before, so a deployment another instance had scaled in between
kept that instance's count under this one's decision (session 29: the check against what it applied last was read
after the other had acted)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.actuation.scale import make_actuator
from kvpilot.runtime.snapshot import Snapshot
from store.db import make_engine, session_factory
from tests.fakekube.scale import deployment, install_scale
from tests.fakekube.server import FakeKube
from tests.helpers.sqlite_store import migrated
from tests.unit.scaler.keda.harness import decision

CHAT = "llm/chat"


@pytest.fixture
def apps() -> Iterator[tuple[FakeKube, Any]]:
    kube = FakeKube().start()
    api = kube.api_client()
    try:
        install_scale(kube)
        kube.create("deployments", deployment("chat", "llm", replicas=2), namespace="llm")
        yield kube, client.AppsV1Api(api)
    finally:
        api.close()
        kube.stop()


def _instance(tmp_path: Path, name: str, apps: Any, clock: VirtualClock) -> Actuation:
    sessions = session_factory(make_engine(migrated(tmp_path / f"{name}.db")))
    return Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock),
                     scaler=make_actuator("direct", apps=apps))  # fmt: skip


def _snapshot(clock: VirtualClock, desired: int | None) -> Snapshot:
    """A tick's snapshot: chat decided at ``desired``, or (None) not this instance's to decide."""
    decisions = {} if desired is None else {CHAT: decision(CHAT, desired=desired, timestamp=clock.now())}
    return Snapshot(tick=1, t=clock.now(), decisions=decisions)


def _replicas(kube: FakeKube) -> int:
    return int(kube.get("deployments", "chat", "llm")["spec"]["replicas"])


async def test_a_deployment_whose_shard_comes_back_is_scaled_to_this_instance_s_decision(
    tmp_path: Path, apps: tuple[FakeKube, Any]
) -> None:
    kube, api = apps
    clock = VirtualClock(1_700_000_000.0)
    a, b = _instance(tmp_path, "a", api, clock), _instance(tmp_path, "b", api, clock)
    await a.after_tick(_snapshot(clock, 4))
    assert _replicas(kube) == 4
    await a.after_tick(_snapshot(clock, None))  # the shard moved to b: a no longer decides chat
    await b.after_tick(_snapshot(clock, 6))
    assert _replicas(kube) == 6
    await a.after_tick(_snapshot(clock, 4))  # back to a (b died), which decides 4 again
    assert _replicas(kube) == 4  # before: 6, skipped as the 4 a had applied


async def test_an_instance_that_leads_again_scales_to_its_decision(tmp_path: Path, apps: tuple[FakeKube, Any]) -> None:
    kube, api = apps
    clock = VirtualClock(1_700_000_000.0)
    a, b = _instance(tmp_path, "a", api, clock), _instance(tmp_path, "b", api, clock)
    await a.after_tick(_snapshot(clock, 4))
    a.not_leading()  # HA: b holds the Lease (the service says so to a's actuation at each pass)
    await b.after_tick(_snapshot(clock, 6))
    await a.after_tick(_snapshot(clock, 4))  # a leads again with the same decision
    assert _replicas(kube) == 4
