"""A target added through the API is stored with its audit row in the caller's transaction, or not at all.

On SQLite, pysqlite begins a transaction only at a write, so the savepoint add_static_target opened before any write
began the transaction itself and committed it at its release: a POST /v1/targets past its request deadline answered
503 "nothing was applied" while its target was stored (and scraped from the next refresh), without its audit row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import TargetInfo
from store import repo
from store.db import DeadlinePassed, make_engine, request_deadline, session_factory, transaction
from store.models import AuditEventRow, StaticTargetRow
from tests.reliability.conftest import Store

TARGET = TargetInfo(url="http://10.0.0.7:8000/metrics", engine="vllm", namespace="llm", deployment="chat")


@pytest.fixture
def sessions(store: Store) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(store.url)
    yield session_factory(engine)
    engine.dispose()


def _add(s: Session, target: TargetInfo = TARGET) -> bool:
    added = repo.add_static_target(session=s, target=target, added_by="admin", now=1.0)
    if added:
        repo.record_audit(session=s, at=1.0, actor="admin", action="target.add", subject=target.url)
    return added


def _stored(sessions: sessionmaker[Session]) -> tuple[int, int]:
    with transaction(sessions) as s:
        targets = s.scalar(select(func.count()).select_from(StaticTargetRow)) or 0
        audits = (
            s.scalar(select(func.count()).select_from(AuditEventRow).where(AuditEventRow.action == "target.add")) or 0
        )
        return targets, audits


def test_a_request_past_its_deadline_stores_nothing(sessions: sessionmaker[Session]) -> None:
    token = request_deadline.set(time.monotonic() - 1.0)  # the API's middleware, for a request already timed out
    try:
        with pytest.raises(DeadlinePassed), transaction(sessions) as s:
            assert _add(s)
    finally:
        request_deadline.reset(token)
    assert _stored(sessions) == (0, 0)  # was (1, 0) on SQLite: the target without its audit row


def test_a_transaction_rolled_back_after_the_add_stores_nothing(sessions: sessionmaker[Session]) -> None:
    def add_then_fail() -> None:
        with transaction(sessions) as s:
            assert _add(s)
            raise RuntimeError("a later step of the same unit of work fails")

    with pytest.raises(RuntimeError):
        add_then_fail()
    assert _stored(sessions) == (0, 0)


def test_parallel_adds_of_one_url_store_it_once_with_one_audit_row(sessions: sessionmaker[Session]) -> None:
    def one(_: int) -> bool:
        with transaction(sessions) as s:
            return _add(s)

    with ThreadPoolExecutor(8) as pool:
        added = list(pool.map(one, range(16)))
    assert added.count(True) == 1
    assert _stored(sessions) == (1, 1)
    with transaction(sessions) as s:
        assert repo.get_static_target(session=s, url=TARGET.url) == TARGET
