"""The loop's periodic writes after the wall clock steps back (NTP): an unchanged decision (the heartbeat), a
deployment's ``last_seen`` and the learned capacity are stored again within their period of the step. Each was due
once ``now`` had moved its period past the last write, so after a step back of an hour none was written for the hour:
the decision history had an hour-long hole and a restart in it restored the rows from before the step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from kvpilot.runtime.persist import TickWrites
from scaler.decision import Decision
from store import repo
from store.buffer import BufferedWriter
from store.db import transaction

START = 1_700_000_000.0
STEP_AT = START + 12 * 5.0  # the wall clock steps back an hour at the 13th tick


def _view() -> Any:
    """What ``TickWrites`` reads of a ``DeploymentView``: its first replica's engine and model, its signals."""
    return SimpleNamespace(replicas=[SimpleNamespace(sample=SimpleNamespace(engine="vllm", model="m"))], values=dict)


def test_the_periodic_writes_go_on_after_a_step_back(factory: sessionmaker[Session]) -> None:
    writes = TickWrites(
        BufferedWriter(factory, max_pending=1000), retention_s=1e9, prune_every_s=1e9, decision_heartbeat_s=60
    )
    walls = [START + 5 * i for i in range(12)] + [STEP_AT - 3600 + 5 * i for i in range(14)]
    for now in walls:  # an unchanged decision every 5 s, 70 s of ticks after the step
        decision = Decision("ns/a", now, 2, 2, 2, 0, "within_tolerance", "")
        writes.persist(now, {"ns/a": _view()}, [], [decision], detected=False, capacity=lambda key: (4.0, "learned"))
        assert writes.writer.flush()
    after = [t for t in walls if t < STEP_AT - 3000]
    with transaction(factory) as s:
        stored = [d.timestamp for d in repo.list_decisions(session=s, deployment="ns/a").items]
        (seen,) = repo.all_deployments(session=s)
        capacity = repo.get_capacity(session=s, deployment="ns/a")
    assert sorted(t for t in stored if t < STEP_AT - 3000) == [after[0], after[0] + 60]  # at the step, a minute on
    assert seen.last_seen == after[0] + 60
    assert capacity is not None
    assert capacity.updated_at == after[0] + 60
