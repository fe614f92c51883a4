"""A drain whose eviction a PodDisruptionBudget refuses shows its steps while it waits: the drain worker, the real
`NodeDrainer` and the fake API server. Each eviction is retried for up to 600 s a pod; until session 31 the steps
were written only when the drain ended, and `GET /v1/drains/{id}` said `executing` and nothing else meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import VirtualClock
from detectors.drain_rails import DrainRails
from kvpilot.actuation import BUSY_MAX_S, Actuation
from kvpilot.actuation.audit import AuditRecord, Outcome
from kvpilot.actuation.drain import Backoff, DrainResult, NodeDrainer
from store import repo
from store.db import make_engine, session_factory, transaction
from store.drain_states import DrainState
from tests.fakekube.eviction import install
from tests.fakekube.server import FakeKube
from tests.helpers.drains import admin_approved
from tests.helpers.poll import until
from tests.helpers.sqlite_store import migrated


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = install(FakeKube()).start()
    try:
        fake.create("nodes", {"metadata": {"name": "gpu-1"}, "spec": {}})
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "gone", "uid": "u", "controller": True}
        meta = {"name": "chat-0", "namespace": "ml", "labels": {"app": "chat"}, "ownerReferences": [owner]}
        fake.create(
            "pods",
            {
                "metadata": meta,
                "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
            namespace="ml",
        )
        budget = {"minAvailable": 1, "selector": {"matchLabels": {"app": "chat"}}}
        fake.create("poddisruptionbudgets", {"metadata": {"name": "chat"}, "spec": budget}, namespace="ml")
        yield fake
    finally:
        fake.stop()


def _trail(sessions: sessionmaker[Session], action_id: int) -> tuple[str, list[str]]:
    with transaction(sessions) as s:
        state = repo.get_drain(session=s, action_id=action_id).state
        return state, [e.message for e in repo.list_drain_events(session=s, action_id=action_id)]


async def test_the_steps_of_a_drain_a_budget_holds_are_on_its_trail_while_it_waits(
    tmp_path: Path, kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvpilot.actuation")
    sessions = session_factory(make_engine(migrated(tmp_path / "k.db")))
    clock = VirtualClock(1000.0)  # the drainer's 600 s deadline never comes: the budget holds until the cancel
    api = kube.api_client()
    try:
        drainer = NodeDrainer(client.CoreV1Api(api), clock=clock, backoff=Backoff(initial_s=0.02, max_s=0.02))
        act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.02)
        action_id = admin_approved(sessions, "gpu-1", clock.now())
        worker = asyncio.ensure_future(act.execute_approved(asyncio.Event()))

        waits = f"drain {action_id} of gpu-1 waits: "

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.getMessage().startswith(waits)]

        def waiting_on_the_budget() -> bool:
            state, trail = _trail(sessions, action_id)
            on_trail = any("PDB refused ml/chat-0" in m for m in trail)
            return state == DrainState.EXECUTING.value and on_trail and bool(said())  # the log says it after the write

        await until(waiting_on_the_budget, what="the budget's refusal on the trail and in the log")
        _, trail = _trail(sessions, action_id)
        assert any(m.startswith("cordon gpu-1: ok cordoned gpu-1") for m in trail), trail
        refusal = next(m for m in trail if "PDB refused" in m)
        assert refusal.startswith("evict ml/chat-0: retry PDB refused ml/chat-0 (The disruption budget chat needs")
        assert "for up to 600 s" in refusal
        assert said() == [waits + refusal.removeprefix("evict ml/chat-0: retry ")]  # once, not once per try

        with transaction(sessions) as s:  # the operator cancels it: the worker hears it and the drain ends
            repo.transition_drain(
                session=s, action_id=action_id, to=DrainState.CANCELLED, actor="admin#0", now=clock.now()
            )
        await asyncio.wait_for(worker, 30)
    finally:
        api.close()
    state, trail = _trail(sessions, action_id)
    assert state == DrainState.CANCELLED.value
    steps = [m for m in trail if m.startswith(("cordon ", "evict "))]
    assert len(steps) == len(set(steps)), trail  # written once each: while it waited, and not again at its end
    assert any(m.startswith("evict gpu-1: skipped cancelled") for m in steps), trail  # the end's own step follows


class _WaitsThenBusy:
    """A drainer whose every try waits on a budget for ml/chat-0 (a RETRY step) and ends as a busy API server says;
    the second try waits on ml/chat-1 as well. Each try returns once its last step is on the drain's trail."""

    def __init__(self, sessions: sessionmaker[Session], clock: VirtualClock) -> None:
        self._sessions = sessions
        self._clock = clock
        self.tries = 0

    def drain(
        self, node: str, *, dry_run: bool = True, on_step: Callable[[AuditRecord], None], **_: object
    ) -> DrainResult:
        self.tries += 1
        result = DrainResult(node, dry_run, busy="evict: the API server asks to wait 40 s", retry_after_s=0.0)
        pods = ["ml/chat-0"] if self.tries == 1 else ["ml/chat-0", "ml/chat-1"]
        steps = [("cordon", node, Outcome.OK, f"cordoned {node} (try {self.tries})")]
        steps += [("evict", pod, Outcome.RETRY, f"PDB refused {pod} (try {self.tries})") for pod in pods]
        for step, target, outcome, message in steps:
            record = AuditRecord(self._clock.now(), node, step, target, outcome, message, dry_run)
            result.records.append(record)
            on_step(record)
        last = f"evict {pods[-1]}: retry PDB refused {pods[-1]} (try {self.tries})"
        deadline = time.monotonic() + 30  # a hang guard only: the worker writes it within a poll
        while last not in _trail(self._sessions, 1)[1] and time.monotonic() < deadline:
            time.sleep(0.005)
        return result

    def cordoned(self) -> set[str] | None:
        return set()


async def test_a_drain_told_to_wait_after_a_budget_held_it_writes_each_step_once(tmp_path: Path) -> None:
    """Its steps on the trail while it waits, and a second try (after the busy API server's backoff) adds only what
    differs: before, each try's steps were written again as they came (the busy wait's 'only when they differ' was
    bypassed for steps written live), once a backoff for as long as the API server throttled."""
    sessions = session_factory(make_engine(migrated(tmp_path / "k.db")))
    clock = VirtualClock(1000.0)
    drainer = _WaitsThenBusy(sessions, clock)
    act = Actuation(sessions=sessions, clock=clock, rails=DrainRails(dry_run=False), drainer=drainer, poll_s=0.02)
    action_id = admin_approved(sessions, "gpu-1", clock.now())
    assert action_id == 1
    for _ in range(2):
        await asyncio.wait_for(act.execute_approved(asyncio.Event()), 60)  # a hang guard only
        state, trail = _trail(sessions, action_id)
        assert state == DrainState.APPROVED.value, trail  # told to wait: tried again after its backoff
        clock.advance(BUSY_MAX_S)
    assert drainer.tries == 2
    steps = [m for m in trail if m.startswith(("cordon ", "evict "))]
    assert steps == [
        "cordon gpu-1: ok cordoned gpu-1 (try 1)",
        "evict ml/chat-0: retry PDB refused ml/chat-0 (try 1)",
        "evict ml/chat-1: retry PDB refused ml/chat-1 (try 2)",
    ], trail
