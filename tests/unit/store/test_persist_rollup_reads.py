"""The loop's roll-up folds read the minute's rows once for each batch of the writer that holds them
(``kvpilot.runtime.persist``, issue 17), wherever a batch begins: a tick of more writes than the writer's chunk (at
fleet scale) is cut across batches, and the folds of each read their rows in one SELECT, not one each. A write
applied alone (the writer isolating a bad one) reads its own row only."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session, sessionmaker

from kvpilot.runtime.persist import TickWrites
from store import repo
from store.buffer import BufferedWriter
from store.db import transaction

DEPLOYMENTS = [f"ns/d{i}" for i in range(12)]


def _views() -> dict[str, Any]:
    return {key: SimpleNamespace(replicas=[], values=lambda: {"kv_usage_mean": 0.4}) for key in DEPLOYMENTS}


def _rollup_reads(factory: sessionmaker[Session]) -> list[str]:
    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM rollups" in statement:
            reads.append(statement)

    event.listen(factory.kw["bind"], "before_cursor_execute", count)
    return reads


def _writes(factory: sessionmaker[Session], *, chunk: int = 500) -> TickWrites:
    writer = BufferedWriter(factory, max_pending=1000, chunk=chunk)
    return TickWrites(writer, retention_s=1e9, prune_every_s=1e9, decision_heartbeat_s=60)


def _samples(factory: sessionmaker[Session]) -> dict[str, list[int]]:
    with transaction(factory) as s:
        points = repo.load_rollups(session=s)
    assert all(p.values["kv_usage_mean"] == 0.4 for p in points)
    by_deployment: dict[str, list[int]] = {}
    for p in points:
        by_deployment.setdefault(p.deployment, []).append(p.samples)
    return by_deployment


def test_a_tick_cut_across_the_writers_batches_reads_its_rows_once_a_batch(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory, chunk=5)  # a tick's 12 folds (and its other writes) in 3 batches
    reads = _rollup_reads(factory)
    ticks = 14  # 12 in minute 0, 2 in minute 1
    for k in range(ticks):
        writes.persist(5.0 * k, _views(), [], [], detected=False, capacity=None)
        assert writes.writer.flush()
    # at most one read a batch (3 a tick) and the first retention pass's; before: the folds after the tick's first
    # batch read their rows one by one, and each minute's first folds their absent rows (135 reads)
    assert len(reads) <= 3 * ticks + 1, len(reads)
    assert _samples(factory) == {key: [12, 2] for key in DEPLOYMENTS}


def test_a_fold_applied_alone_reads_its_own_row_only(factory: sessionmaker[Session]) -> None:
    writes = _writes(factory)
    writes.persist(0.0, _views(), [], [], detected=False, capacity=None)
    assert writes.writer.flush()
    reads = _rollup_reads(factory)
    writes.writer.submit("bad", lambda s: s.execute(text("INSERT INTO no_such_table VALUES (1)")))
    writes.persist(5.0, _views(), [], [], detected=False, capacity=None)  # applied one by one after the bad write
    assert writes.writer.flush()
    assert writes.writer.failed_total == 1
    # each fold applied alone read one row (its deployment and minute: two parameters), not the tick's next ones;
    # before, the tick's read of all 12, applied alone too, was thrown away with its session (13 reads)
    assert [r.count("?") for r in reads] == [2] * len(DEPLOYMENTS), reads
    assert _samples(factory) == {key: [2] for key in DEPLOYMENTS}
