"""Until when each deployment's newest stored decision was still the one in force (``StoredThrough``): what a
sharded holder writes on its shards' Leases for the instance that takes one over (issue 17). Only ticks whose writes
the store committed count, and a shard is vouched for only while every deployment the loop keeps of it is."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from kvpilot.runtime.persist import TickWrites
from scaler.decision import Decision
from store.buffer import BufferedWriter

SHARD = {"ns/a": 0, "ns/b": 0, "ns/c": 1}.__getitem__


def _steady(key: str, t: float) -> Decision:
    return Decision(key, t, 2, 2, 2, 0, "steady", "")


def _writes(factory: sessionmaker[Session]) -> TickWrites:
    writer = BufferedWriter(factory, max_pending=1000)
    return TickWrites(writer, retention_s=1e9, prune_every_s=1e9, decision_heartbeat_s=60)


def test_a_tick_counts_once_the_store_committed_its_writes(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    for t in (0.0, 5.0, 10.0):  # unchanged after the first: rows stored at 0 only
        writes.persist(t, {}, [], [_steady("ns/a", t), _steady("ns/c", t)], detected=False, capacity=None)
    assert writes.through.by_shard(SHARD) == {}  # queued, not committed: nothing vouched for
    assert writes.writer.flush()
    assert writes.through.by_shard(SHARD) == {0: 10.0, 1: 10.0}  # the rows of 0 s, in force at 10 s


def test_a_transaction_rolled_back_vouches_for_nothing(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    writes.persist(0.0, {}, [], [_steady("ns/a", 0.0)], detected=False, capacity=None)
    assert writes.writer.flush()
    writes.persist(5.0, {}, [], [_steady("ns/a", 5.0)], detected=False, capacity=None)
    mark = writes.through.mark(5.0, ["ns/a"], ["ns/a"])
    with factory() as s:  # the store went away before the COMMIT
        mark(s)
        s.rollback()
    assert writes.through.by_shard(SHARD) == {0: 0.0}


def test_a_deployment_kept_but_not_decided_holds_its_shard_back(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    writes.persist(0.0, {}, [], [_steady("ns/a", 0.0), _steady("ns/b", 0.0)], detected=False, capacity=None)
    writes.persist(5.0, {}, [], [_steady("ns/a", 5.0)], detected=False, capacity=None)  # b not decided at 5 s
    writes.persist(10.0, {}, [], [], detected=False, capacity=None)  # a tick that decided nothing
    assert writes.writer.flush()
    assert writes.through.by_shard(SHARD) == {0: 0.0}  # b's row is only known in force at 0 s
    writes.stored.pop("ns/b")  # deleted: the loop forgets it
    writes.persist(15.0, {}, [], [_steady("ns/a", 15.0)], detected=False, capacity=None)
    assert writes.writer.flush()
    assert writes.through.by_shard(SHARD) == {0: 15.0}
    writes.stored["ns/c"] = _steady("ns/c", 15.0)  # resumed from the store, not yet decided here
    writes.persist(20.0, {}, [], [_steady("ns/a", 20.0)], detected=False, capacity=None)
    assert writes.writer.flush()
    assert writes.through.by_shard(SHARD) == {0: 20.0}  # shard 1 has no time of ours
