"""A drain kvpilot requested is asked again before it runs (review G, session 18, round 0 item 1): with approval
required it can wait hours, and the worker cordoned and evicted whatever had happened meanwhile. Withdrawn when its
finding closed, held back (to requested, freeing its rail slot) while its node holds a deployment's last ready
replica; an operator's drain keeps its word.
The store is the real one (SQLite), the cluster the fake API server with the real ``NodeDrainer``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from collector.samples import ReplicaSample
from collector.state import ReplicaView
from detectors.drain_rails import DrainRails
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.actuation.drain import NodeDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import make_engine, session_factory, transaction
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.helpers.sqlite_store import migrated


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    return session_factory(make_engine(migrated(tmp_path / "k.db")))


def _stuck(node: str, since: float, gpu: str = "GPU-1") -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu=gpu), since, f"XID 79 on {node}",
                   action="drain_node")  # fmt: skip


def _replica(name: str, node: str, *, ready: bool = True) -> ReplicaView:
    sample = ReplicaSample("llm", "chat", name, node, "vllm", None, 1000.0)
    return ReplicaView(sample, ready, True, 1000.0, 0.0, None, None, None, None, None, None, None, None, None, None, ())


def _store_findings(sessions: sessionmaker[Session], now: float, *active: Finding) -> None:
    with transaction(sessions) as s:  # what the loop persists each tick: these open, the others close
        repo.upsert_findings(session=s, active=list(active), now=now)


def _drains(sessions: sessionmaker[Session]) -> list[tuple[str, str, str]]:
    with transaction(sessions) as s:
        rows = sorted(repo.list_drains(session=s).items, key=lambda r: r.id)
        return [(r.node, r.requested_by, r.state) for r in rows]


def _events(sessions: sessionmaker[Session], node: str) -> list[str]:
    with transaction(sessions) as s:
        (row,) = [r for r in repo.list_drains(session=s).items if r.node == node]
        return [e.message for e in repo.list_drain_events(session=s, action_id=row.id)]


def _approve(sessions: sessionmaker[Session], node: str, now: float, max_concurrent: int = 2) -> None:
    with transaction(sessions) as s:
        (row,) = [r for r in repo.list_drains(session=s).items if r.node == node]
        repo.approve_drain(session=s, action_id=row.id, actor="admin#0", now=now, max_concurrent=max_concurrent)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube()).start()
    try:
        for node in ("n0", "n1"):
            fake.create("nodes", {"metadata": {"name": node}, "spec": {}})
        owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "chat-r", "uid": "u"}]
        for name, node in (("chat-0", "n0"), ("chat-1", "n1")):
            pod = {
                "metadata": {"name": name, "namespace": "llm", "labels": {"app": "chat"}, "ownerReferences": owner},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            fake.create("pods", pod, namespace="llm")
        yield fake
    finally:
        fake.stop()


def _cluster_actuation(kube: FakeKube, sessions: sessionmaker[Session], clock: VirtualClock) -> Actuation:
    drainer = NodeDrainer(client.CoreV1Api(kube.api_client()))
    rails = DrainRails(dry_run=False, max_concurrent_nodes=2)
    return Actuation(sessions=sessions, clock=clock, rails=rails, drainer=drainer, poll_s=0.05)


def _touched(kube: FakeKube, node: str) -> list[tuple[str, str]]:
    """The writes the drain made: the node's replace (cordon, taint) and the evictions."""
    return [(m, p) for m, p in kube.requests if m in ("PUT", "POST", "PATCH") and (node in p or "eviction" in p)]


async def test_a_request_whose_finding_closed_is_withdrawn_and_an_operators_is_not(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock))
    sick = _stuck("n0", 990.0)
    _store_findings(sessions, clock.now(), sick)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[sick]))
    with transaction(sessions) as s:
        repo.request_drain(session=s, node="n1", requested_by="admin#0", now=clock.now(), dry_run=True, reason="RMA")
    assert _drains(sessions) == [("n0", "kvpilot", "requested"), ("n1", "admin#0", "requested")]
    clock.advance(3600.0)  # nobody approved it; the GPU came back and its finding closed
    await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=[sick]))  # still open in this snapshot: kept
    assert _drains(sessions)[0][2] == "requested"
    _store_findings(sessions, clock.now())
    await act.after_tick(Snapshot(tick=3, t=clock.now()))
    assert _drains(sessions) == [("n0", "kvpilot", "cancelled"), ("n1", "admin#0", "requested")]
    assert any(m.startswith(f"withdrawn by kvpilot: its finding {sick.id}") for m in _events(sessions, "n0"))


async def test_a_request_stays_while_another_finding_still_flags_its_node(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=True), drainer=NoClusterDrainer(clock))
    first, second = _stuck("n0", 990.0, "GPU-1"), _stuck("n0", 995.0, "GPU-2")
    _store_findings(sessions, clock.now(), first, second)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[first, second]))
    clock.advance(60.0)
    _store_findings(sessions, clock.now(), second)  # the finding the request names closed; GPU-2 is still stuck
    await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=[second]))
    assert _drains(sessions) == [("n0", "kvpilot", "requested")]


async def test_an_approved_drain_whose_finding_closed_is_withdrawn_not_run(tmp_path: Path, kube: FakeKube) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _cluster_actuation(kube, sessions, clock)
    sick = _stuck("n0", 990.0)
    fleet = [_replica("chat-0", "n0"), _replica("chat-1", "n1")]
    _store_findings(sessions, clock.now(), sick)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), replicas=fleet, findings=[sick]))
    clock.advance(3600.0)
    _store_findings(sessions, clock.now())  # GPU back, finding closed; then an admin approves the old request
    _approve(sessions, "n0", clock.now())
    await act.after_tick(Snapshot(tick=2, t=clock.now(), replicas=fleet))
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "kvpilot", "cancelled")]
    assert _touched(kube, "n0") == []  # neither cordoned nor evicted
    assert not (kube.get("nodes", "n0").get("spec") or {}).get("unschedulable")
    assert any(m.startswith("withdrawn by kvpilot") for m in _events(sessions, "n0"))


async def test_an_approved_drain_is_held_while_its_node_holds_the_last_ready_replica(
    tmp_path: Path, kube: FakeKube
) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _cluster_actuation(kube, sessions, clock)
    sick = _stuck("n0", 990.0)
    _store_findings(sessions, clock.now(), sick)
    await act.after_tick(  # requested while chat-1 on n1 was ready too
        Snapshot(tick=1, t=clock.now(), replicas=[_replica("chat-0", "n0"), _replica("chat-1", "n1")], findings=[sick])
    )
    clock.advance(1800.0)
    _approve(sessions, "n0", clock.now())
    alone = [_replica("chat-0", "n0"), _replica("chat-1", "n1", ready=False)]  # chat-1 went unready meanwhile
    for tick in (2, 3):
        await act.after_tick(Snapshot(tick=tick, t=clock.now(), replicas=alone, findings=[sick]))
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "kvpilot", "requested")]  # held back: its rail slot freed
    assert _touched(kube, "n0") == []
    held = [m for m in _events(sessions, "n0") if m.startswith("held:")]
    assert held == [
        "held: n0 now holds the last ready replica of llm/chat; back to requested, freeing its drains.max_concurrent "
        "slot, and approved again by kvpilot when it no longer does"
    ]
    both = [_replica("chat-0", "n0"), _replica("chat-1", "n1")]  # chat-1 ready again: approved again, and runs
    await act.after_tick(Snapshot(tick=4, t=clock.now(), replicas=both, findings=[sick]))
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "kvpilot", "done")]
    assert kube.get("nodes", "n0")["spec"]["unschedulable"] is True
    assert "approved again: held back after its approval, the rails allow it now" in _events(sessions, "n0")


def _live(sessions: sessionmaker[Session]) -> dict[str, str]:
    """The live drains by node: what the loop puts in each snapshot's ``node_drains``."""
    with transaction(sessions) as s:
        rows = repo.drains_in(session=s, states=("requested", "approved", "executing"), limit=100)
        return {r.node: r.state for r in rows}


@pytest.mark.parametrize("require_approval", [True, False])
async def test_a_held_drain_does_not_hold_back_another_nodes_drain(
    tmp_path: Path, kube: FakeKube, require_approval: bool
) -> None:
    """Review G round 8: with drains.max_concurrent 1 (the default), a drain held because its node carries a
    deployment's only ready replica kept its slot, so every other node's drain waited as long as that lasted."""
    kube.create("nodes", {"metadata": {"name": "n2"}, "spec": {}})
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    drainer = NodeDrainer(client.CoreV1Api(kube.api_client()))
    rails = DrainRails(dry_run=False, max_concurrent_nodes=1)
    act = Actuation(sessions=sessions, clock=clock, rails=rails, drainer=drainer, poll_s=0.05,
                    require_approval=require_approval)  # fmt: skip
    a, b = _stuck("n0", 990.0), _stuck("n2", 1500.0)
    both = [_replica("chat-0", "n0"), _replica("chat-1", "n1")]
    alone = [_replica("chat-0", "n0"), _replica("chat-1", "n1", ready=False)]
    _store_findings(sessions, clock.now(), a)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), replicas=both, findings=[a]))
    if require_approval:
        _approve(sessions, "n0", clock.now(), max_concurrent=1)
    assert _drains(sessions) == [("n0", "kvpilot", "approved")]
    clock.advance(600.0)  # chat-1 went unready before the worker's pass: n0 now carries chat's only ready replica
    await act.after_tick(Snapshot(tick=2, t=clock.now(), replicas=alone, findings=[a], node_drains=_live(sessions)))
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _touched(kube, "n0") == []
    _store_findings(sessions, clock.now(), a, b)  # a worse failure on n2: its drain must not wait for n0's
    snap = Snapshot(tick=3, t=clock.now(), replicas=alone, findings=[a, b], node_drains=_live(sessions))
    await act.after_tick(snap)
    if require_approval:
        _approve(sessions, "n2", clock.now(), max_concurrent=1)  # RailFull while n0's held drain kept its slot
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "kvpilot", "requested"), ("n2", "kvpilot", "done")]
    assert kube.get("nodes", "n2")["spec"]["unschedulable"] is True
    assert _touched(kube, "n0") == []
    clock.advance(600.0)  # chat-1 ready again: n0's drain is approved again through the rails (n2's is done) and runs
    await act.after_tick(Snapshot(tick=4, t=clock.now(), replicas=both, findings=[a], node_drains=_live(sessions)))
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "kvpilot", "done"), ("n2", "kvpilot", "done")]
    assert kube.get("nodes", "n0")["spec"]["unschedulable"] is True


async def test_an_operators_drain_runs_on_the_operators_word(tmp_path: Path, kube: FakeKube) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _cluster_actuation(kube, sessions, clock)
    with transaction(sessions) as s:  # no finding; n0 holds chat's last ready replica
        row = repo.request_drain(session=s, node="n0", requested_by="admin#0", now=clock.now(), dry_run=False)
        repo.approve_drain(session=s, action_id=row.id, actor="admin#0", now=clock.now(), max_concurrent=1)
    alone = [_replica("chat-0", "n0"), _replica("chat-1", "n1", ready=False)]
    await act.after_tick(Snapshot(tick=1, t=clock.now(), replicas=alone))
    await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
    assert _drains(sessions) == [("n0", "admin#0", "done")]
