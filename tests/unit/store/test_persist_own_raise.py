"""A decision raised above the planner's count records that count (``scaler.own_raise.PLANNER_REPLICAS``), and the
row a restart resumes from must carry the newest: a change of it alone is stored at once, not at the heartbeat."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from kvpilot.runtime.persist import TickWrites
from scaler.decision import Decision
from scaler.own_raise import PLANNER_REPLICAS, planner_replicas
from store import repo
from store.buffer import BufferedWriter
from store.db import transaction


def _raised(t: float, planner: int) -> Decision:
    return Decision("ns/a", t, 6, 4, 6, 0, "rollout_surge", "", forecast={PLANNER_REPLICAS: float(planner)})


def test_the_planners_count_under_the_raise_is_stored_when_it_alone_changes(factory: sessionmaker[Session]) -> None:
    writes = TickWrites(
        BufferedWriter(factory, max_pending=100), retention_s=1e9, prune_every_s=1e9, decision_heartbeat_s=60
    )
    writes.persist(0.0, {}, [], [_raised(0.0, 4)], detected=False, capacity=None)
    writes.persist(5.0, {}, [], [_raised(5.0, 4)], detected=False, capacity=None)  # unchanged: the heartbeat's
    writes.persist(10.0, {}, [], [_raised(10.0, 5)], detected=False, capacity=None)  # 5 + 1 instead of 4 + 2
    assert writes.writer.flush()
    with transaction(factory) as s:
        stored = repo.latest_decisions(session=s)["ns/a"]
    assert (stored.timestamp, planner_replicas(stored)) == (10.0, 5)
