"""The leader's drain requests (``Actuation.after_tick``) over several ticks: a finding's id is its kind and
subject, so a GPU that fails again after its node was drained and repaired has the id of its first failure; and
the live-drain map a snapshot carries was read before the previous pass approved anything (review G, session 18)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from detectors.finding import Finding, Severity, Subject
from kvpilot.actuation import Actuation, NoClusterDrainer
from kvpilot.runtime.snapshot import Snapshot
from store import repo
from store.db import make_engine, session_factory, transaction
from store.drain_states import DrainState
from tests.helpers.sqlite_store import migrated


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    return session_factory(make_engine(migrated(tmp_path / "k.db")))


def _stuck(node: str, since: float) -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu="GPU-1"), since, f"XID 79 on {node}",
                   action="drain_node")  # fmt: skip


def _actuation(sessions: sessionmaker[Session], clock: VirtualClock, *, require_approval: bool = True) -> Actuation:
    rails = DrainRails(dry_run=True)
    return Actuation(sessions=sessions, clock=clock, rails=rails, drainer=NoClusterDrainer(clock),
                     require_approval=require_approval)  # fmt: skip


def _drains(sessions: sessionmaker[Session]) -> list[tuple[str, str]]:
    with transaction(sessions) as s:
        return [(r.node, r.state) for r in sorted(repo.list_drains(session=s).items, key=lambda r: r.id)]


async def test_the_same_gpu_failing_again_after_its_drain_is_drained_again(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _actuation(sessions, clock)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[_stuck("n0", 990.0)]))
    await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=[_stuck("n0", 990.0)]))
    assert _drains(sessions) == [("n0", "requested")]  # one condition, one request
    with transaction(sessions) as s:
        (row,) = repo.list_drains(session=s).items
        for to in (DrainState.APPROVED, DrainState.EXECUTING, DrainState.DONE):
            repo.transition_drain(session=s, action_id=row.id, to=to, actor="admin#0", now=clock.now())
    clock.advance(3600.0)  # repaired, uncordoned; the finding closed. A day later the same GPU fails again:
    clock.advance(86400.0)
    await act.after_tick(Snapshot(tick=3, t=clock.now(), findings=[_stuck("n0", clock.now() - 10.0)]))
    assert _drains(sessions) == [("n0", "done"), ("n0", "requested")]


async def test_a_finished_or_cancelled_drain_of_a_condition_still_open_is_not_requested_again(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _actuation(sessions, clock)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[_stuck("n0", 990.0)]))
    with transaction(sessions) as s:
        (row,) = repo.list_drains(session=s).items
        repo.transition_drain(session=s, action_id=row.id, to=DrainState.CANCELLED, actor="admin#0", now=clock.now())
    clock.advance(600.0)
    await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=[_stuck("n0", 990.0)]))  # the operator's word stands
    assert _drains(sessions) == [("n0", "cancelled")]


async def test_without_approval_a_request_the_rail_held_back_is_approved_once_the_rail_frees(tmp_path: Path) -> None:
    # One drain at a time, no approval needed. n0 is approved; its finding closes the next tick as n1's opens. The
    # map of live drains that snapshot carries was read by the actuator pass before the one that approved n0, so
    # n1 looks free to drain: it is requested and the store's rail holds its approval back. Once n0 is done, n1
    # must be approved, as a request made while the rail was free would have been.
    sessions = _sessions(tmp_path)
    clock = VirtualClock(1000.0)
    act = _actuation(sessions, clock, require_approval=False)
    await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[_stuck("n0", 990.0)]))
    assert _drains(sessions) == [("n0", "approved")]
    n1 = [_stuck("n1", 1000.0)]
    await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=n1))  # the map read before n0's approval: {}
    assert _drains(sessions) == [("n0", "approved"), ("n1", "requested")]  # held back by the store's rail
    live = {"n0": "approved", "n1": "requested"}
    await act.after_tick(Snapshot(tick=3, t=clock.now(), findings=n1, node_drains=live))  # refused: n0 drains
    with transaction(sessions) as s:
        n0 = repo.latest_drain_for_node(session=s, node="n0")
        assert n0 is not None
        for to in (DrainState.EXECUTING, DrainState.DONE):
            repo.transition_drain(session=s, action_id=n0.id, to=to, actor="kvpilot", now=clock.now())
    await act.after_tick(Snapshot(tick=4, t=clock.now(), findings=n1, node_drains={"n1": "requested"}))
    assert _drains(sessions) == [("n0", "done"), ("n1", "approved")]


async def test_a_drain_cancelled_while_it_runs_keeps_what_it_did_in_its_audit_trail(tmp_path: Path) -> None:
    # The node was cordoned and an eviction refused by its PodDisruptionBudget when the operator cancelled: the
    # worker dropped the drain's records ("the operator's word stands"), so the audit did not say the node was
    # left cordoned by kvpilot. NodeDrainer's docstring: "what was already evicted is in the records".
    import asyncio

    from kubernetes import client

    from kvpilot.actuation.drain import Backoff, NodeDrainer
    from tests.fakekube.eviction import install
    from tests.fakekube.server import FakeKube

    kube = install(FakeKube()).start()
    api = kube.api_client()
    try:
        kube.create("nodes", {"metadata": {"name": "n0"}, "spec": {}})
        owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "c", "uid": "u"}]
        pod = {
            "metadata": {"name": "chat-0", "namespace": "llm", "labels": {"app": "chat"}, "ownerReferences": owner},
            "spec": {"nodeName": "n0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        kube.create("pods", pod, namespace="llm")
        pdb = {"metadata": {"name": "chat"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "chat"}}}}
        kube.create("poddisruptionbudgets", pdb, namespace="llm")  # every eviction is a 429
        sessions = _sessions(tmp_path)
        clock = VirtualClock(1000.0)
        drainer = NodeDrainer(client.CoreV1Api(api), backoff=Backoff(initial_s=30.0, max_s=60.0))
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.05)
        with transaction(sessions) as s:
            action = repo.request_drain(session=s, node="n0", requested_by="admin#0", now=clock.now(), dry_run=False)
            repo.approve_drain(session=s, action_id=action.id, actor="admin#0", now=clock.now(), max_concurrent=1)
            action_id = action.id
        worker = asyncio.ensure_future(act.execute_approved(asyncio.Event()))
        for _ in range(200):  # until the PDB has refused once (the drain now waits 30 s)
            if any(p.endswith("/eviction") for _, p in kube.requests):
                break
            await asyncio.sleep(0.05)
        with transaction(sessions) as s:
            repo.transition_drain(session=s, action_id=action_id, to=DrainState.CANCELLED, actor="admin#0",
                                  now=clock.now())  # fmt: skip
        await asyncio.wait_for(worker, 10)
        with transaction(sessions) as s:
            events = [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]
        assert any(m.startswith("cordon n0: ok cordoned n0") for m in events), events
        assert any("PDB refused llm/chat-0" in m for m in events), events
    finally:
        api.close()
        kube.stop()


def _gpu(node: str, gpu: str, since: float) -> Finding:
    return Finding("stuck_gpu", Severity.CRITICAL, Subject(node=node, gpu=gpu), since, f"XID 79 on {node} {gpu}",
                   action="drain_node")  # fmt: skip


async def test_a_node_with_two_sick_gpus_is_drained_once(tmp_path: Path) -> None:
    # Review G (session 18): an action recorded one finding id; on a node flagged by two GPUs, once the recorded one
    # closed (the other still open), a node already drained was requested (and, without approval, drained) again.
    # Same for a second GPU whose finding opened while the drain was waiting or running.
    import asyncio

    from kubernetes import client

    from kvpilot.actuation.drain import NodeDrainer
    from tests.fakekube.eviction import install
    from tests.fakekube.server import FakeKube

    kube = install(FakeKube()).start()
    api = kube.api_client()
    try:
        for node in ("n0", "n1"):
            kube.create("nodes", {"metadata": {"name": node}, "spec": {}})
        sessions = _sessions(tmp_path)
        clock = VirtualClock(1000.0)
        drainer = NodeDrainer(client.CoreV1Api(api), clock=clock)
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False, max_concurrent_nodes=2),
                        drainer=drainer, require_approval=False, poll_s=0.05)  # fmt: skip
        a, b = _gpu("n0", "GPU-1", 990.0), _gpu("n0", "GPU-2", 995.0)  # both flag n0 when it is requested
        c = _gpu("n1", "GPU-1", 990.0)  # n1: a second GPU fails while its drain runs
        await act.after_tick(Snapshot(tick=1, t=clock.now(), findings=[a, b, c]))
        clock.advance(5.0)
        d = _gpu("n1", "GPU-2", clock.now() - 2.0)
        await act.after_tick(Snapshot(tick=2, t=clock.now(), findings=[a, b, c, d], node_drains=_live(sessions)))
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert _drains(sessions) == [("n0", "done"), ("n1", "done")]
        for tick in (3, 4):  # the first GPU of each node came back; the second is still stuck
            clock.advance(60.0)
            await act.after_tick(Snapshot(tick=tick, t=clock.now(), findings=[b, d], node_drains=_live(sessions)))
            await asyncio.wait_for(act.execute_approved(asyncio.Event()), 10)
        assert _drains(sessions) == [("n0", "done"), ("n1", "done")]  # was a second request of each, drained again
        with transaction(sessions) as s:
            n0 = repo.latest_drain_for_node(session=s, node="n0")
            assert n0 is not None
            assert n0.evidence["finding_ids"] == ",".join(sorted([a.id, b.id]))
        clock.advance(86400.0)  # repaired and uncordoned; GPU-2 of n0 fails again: a new episode, a new drain
        again = _gpu("n0", "GPU-2", clock.now() - 10.0)
        await act.after_tick(Snapshot(tick=5, t=clock.now(), findings=[again], node_drains=_live(sessions)))
        assert _drains(sessions) == [("n0", "done"), ("n1", "done"), ("n0", "approved")]
    finally:
        api.close()
        kube.stop()


def _live(sessions: sessionmaker[Session]) -> dict[str, str]:
    with transaction(sessions) as s:
        return {
            r.node: r.state for r in repo.drains_in(session=s, states=("requested", "approved", "executing"), limit=100)
        }
