"""Retention against the drain budget: retention deletes finished drains older than ``store.retention_days``, and
``drains.budget`` counts the drains started within ``drains.budget_window_s``. With retention_days 0.5 and the
default day-long window, the retention pass deleted a drain done 13 h before while the budget still counted it, and
with budget 1 a second drain was approved the same day (session 30 helper E measured it; efab2be refused the
combination at start). Now the retention pass keeps every drain started within the window, with its events, whatever
retention_days says; past the window it goes as before. SQLite and a real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import func, select

from kvpilot.runtime.persist import TickWrites
from kvpilot.settings import load_settings
from scaler.decision import Decision
from store import repo
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory, transaction
from store.drain_states import DrainState
from store.errors import BudgetSpent
from store.models import DrainActionRow, DrainEventRow
from tests.reliability.conftest import Store

START = 1_700_000_000.0  # the first drain starts here
HOUR_S = 3600.0


def _view() -> Any:
    """What ``TickWrites`` reads of a ``DeploymentView``: its first replica's engine and model, its signals."""
    return SimpleNamespace(replicas=[SimpleNamespace(sample=SimpleNamespace(engine="vllm", model="m"))], values=dict)


def _tick(writes: TickWrites, now: float) -> None:
    decision = Decision("ns/a", now, 2, 2, 2, 0, "within_tolerance", "")
    writes.persist(now, {"ns/a": _view()}, [], [decision], detected=False, capacity=None)
    assert writes.writer.flush()


def test_retention_keeps_the_drains_the_budget_counts(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "k.yaml"
    path.write_text("store: {retention_days: 0.5}\ndrains: {budget: 1}\n")  # half a day; the default day-long window
    settings = load_settings(path)
    window_s, budget = settings.drains.budget_window_s, settings.drains.budget
    engine = make_engine(store.url)
    try:
        sessions = session_factory(engine)
        writes = TickWrites(BufferedWriter(sessions, max_pending=1000),
                            retention_s=settings.store.retention_days * 86400.0, prune_every_s=HOUR_S,
                            decision_heartbeat_s=60, drains_kept_s=window_s)  # fmt: skip

        def drain(node: str, now: float) -> None:
            """A drain of ``node`` requested and approved under the budget at ``now``, run and done 10 min later."""
            with transaction(sessions) as s:
                d = repo.request_drain(session=s, node=node, requested_by="kvpilot", now=now, dry_run=False).id
                repo.approve_drain(session=s, action_id=d, actor="kvpilot", now=now, max_concurrent=1,
                                   budget=budget, budget_window_s=window_s)  # fmt: skip
                repo.transition_drain(session=s, action_id=d, to=DrainState.EXECUTING, actor="kvpilot", now=now)
                repo.transition_drain(session=s, action_id=d, to=DrainState.DONE, actor="kvpilot", now=now + 600)

        def kept() -> tuple[int, int]:
            with transaction(sessions, reads_only=True) as s:
                actions = int(s.scalar(select(func.count()).select_from(DrainActionRow)) or 0)
                return actions, int(s.scalar(select(func.count()).select_from(DrainEventRow)) or 0)

        drain("n0", START)
        _tick(writes, START + 700.0)  # the process runs; its first retention pass deletes nothing
        _tick(writes, START + 13 * HOUR_S)  # the drain is 13 h old: past retention, within the budget's window
        assert kept() == (1, 4)  # before: (0, 0), the drain and its events deleted
        with transaction(sessions) as s:
            second = repo.request_drain(
                session=s, node="n1", requested_by="kvpilot", now=START + 13 * HOUR_S, dry_run=False
            ).id
        with pytest.raises(BudgetSpent), transaction(sessions) as s:  # before: approved, a second drain that day
            repo.approve_drain(session=s, action_id=second, actor="kvpilot", now=START + 13 * HOUR_S,
                               max_concurrent=1, budget=budget, budget_window_s=window_s)  # fmt: skip
        with transaction(sessions) as s:
            repo.transition_drain(session=s, action_id=second, to=DrainState.CANCELLED, actor="op",
                                  now=START + 13 * HOUR_S)  # fmt: skip

        # past the window the first drain ages out as before (the cancelled approval too), and the budget is free
        _tick(writes, START + window_s + 13 * HOUR_S)
        assert kept() == (0, 0)
        drain("n1", START + window_s + 13 * HOUR_S)  # approved under the budget
        assert kept() == (1, 4)
    finally:
        engine.dispose()
