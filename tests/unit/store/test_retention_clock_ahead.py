"""Retention at a start whose wall clock is far ahead: a store holding an hour of history, and a kvpilot started on a
host whose clock reads a year later. Before, its first tick's prune cut at ``now - retention`` and deleted every
decision, roll-up, closed finding and finished drain: the whole history, for a clock wrong by more than
``store.retention_days``. Now a prune that would delete every row written before this process started (the newest
of them older than the horizon) is refused at the start, said once, and until a prune goes ahead or the process has
run for the horizon (a start on a clock that far ahead cannot be told from a stop that long); a correct clock ages
rows out as before. SQLite and a real PostgreSQL."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from detectors.finding import Finding, Severity, Subject
from kvpilot.runtime.persist import TickWrites
from scaler.decision import Decision
from store import repo
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory, transaction
from store.drain_states import DrainState
from store.models import DecisionRow, DrainActionRow, FindingRow, RollupRow
from tests.reliability.conftest import Store

START = 1_700_000_000.0  # the stored hour starts here
HOUR_S, DAY_S = 3600.0, 86400.0
RETENTION_S = 30 * DAY_S


class _Monotonic:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _view() -> Any:
    """What ``TickWrites`` reads of a ``DeploymentView``: its first replica's engine and model, its signals."""
    return SimpleNamespace(replicas=[SimpleNamespace(sample=SimpleNamespace(engine="vllm", model="m"))], values=dict)


def _decision(t: float) -> Decision:
    return Decision("ns/a", t, 2, 2, 2, 0, "within_tolerance", "")


def _an_hour_of_history(sessions: sessionmaker[Session]) -> None:
    """A decision and a roll-up a minute, a finding closed and a drain done, over the hour from START."""
    finding = Finding("stuck_gpu", Severity.CRITICAL, Subject(node="n0", gpu="0"), START, "XID 79", {}, "drain_node")
    with transaction(sessions) as s:
        for i in range(60):
            t = START + 60.0 * i
            repo.record_decision(session=s, decision=_decision(t))
            repo.record_rollup(session=s, deployment="ns/a", t=t, signals={"arrival_rate": 1.0})
        repo.upsert_findings(session=s, active=[finding], now=START)
        repo.upsert_findings(session=s, active=[], now=START + 600)  # closed
        d = repo.request_drain(session=s, node="n0", requested_by="kvpilot", now=START, dry_run=True).id
        for to in (DrainState.APPROVED, DrainState.EXECUTING, DrainState.DONE):
            repo.transition_drain(session=s, action_id=d, to=to, actor="kvpilot", now=START + 900)


def _counts(sessions: sessionmaker[Session]) -> dict[str, int]:
    with transaction(sessions, reads_only=True) as s:
        return {
            m.__tablename__: int(s.scalar(select(func.count()).select_from(m)) or 0)
            for m in (DecisionRow, RollupRow, FindingRow, DrainActionRow)
        }


def _writes(sessions: sessionmaker[Session], monotonic: _Monotonic | None = None) -> TickWrites:
    """The loop's writes; on the process's own monotonic clock unless ``monotonic`` is given."""
    kw: dict[str, Any] = {} if monotonic is None else {"monotonic": monotonic}
    return TickWrites(BufferedWriter(sessions, max_pending=1000), retention_s=RETENTION_S, prune_every_s=HOUR_S,
                      decision_heartbeat_s=60, **kw)  # fmt: skip


def _tick(writes: TickWrites, now: float) -> None:
    writes.persist(now, {"ns/a": _view()}, [], [_decision(now)], detected=False, capacity=None)
    assert writes.writer.flush()


HISTORY = {"decisions": 60, "rollups": 60, "findings": 1, "drain_actions": 1}


def test_a_start_a_year_ahead_keeps_the_history(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(store.url)
    try:
        sessions = session_factory(engine)
        _an_hour_of_history(sessions)
        writes = _writes(sessions)  # the process's own monotonic clock: it has run for seconds
        ahead = START + HOUR_S + 365 * DAY_S
        with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.persist"):
            for i in range(3):  # three hourly prunes
                _tick(writes, ahead + i * HOUR_S)
        # before: {'decisions': 1, 'rollups': 1, 'findings': 0, 'drain_actions': 0}, this tick's rows alone
        after = _counts(sessions)
        assert after == {"decisions": 60 + 3, "rollups": 60 + 3, "findings": 1, "drain_actions": 1}
        said = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
        assert len(said) == 1, said  # once, not every prune
        assert "nothing deleted" in said[0]
    finally:
        engine.dispose()


def test_once_the_process_ran_for_the_horizon_the_old_rows_go(store: Store) -> None:
    engine = make_engine(store.url)
    try:
        sessions = session_factory(engine)
        _an_hour_of_history(sessions)
        monotonic = _Monotonic()
        writes = _writes(sessions, monotonic)
        ahead = START + HOUR_S + 365 * DAY_S
        _tick(writes, ahead)
        assert _counts(sessions) == {"decisions": 61, "rollups": 61, "findings": 1, "drain_actions": 1}
        monotonic.t += RETENTION_S  # run for the horizon on that clock: it is the time now, as far as kvpilot knows
        _tick(writes, ahead + RETENTION_S)
        # the hour gone; this process's two ticks kept (its first one exactly at the horizon)
        assert _counts(sessions) == {"decisions": 2, "rollups": 2, "findings": 0, "drain_actions": 0}
    finally:
        engine.dispose()


@pytest.mark.parametrize("stopped_s", [0.0, 2 * DAY_S])
def test_a_correct_clock_ages_rows_out_as_before(store: Store, stopped_s: float) -> None:
    engine = make_engine(store.url)
    try:
        sessions = session_factory(engine)
        _an_hour_of_history(sessions)
        writes = _writes(sessions)
        start = START + HOUR_S + stopped_s  # kvpilot (re)started after the hour and a stop
        _tick(writes, start)
        assert _counts(sessions) == {"decisions": 61, "rollups": 61, "findings": 1, "drain_actions": 1}
        # the hour's first rows pass the horizon first: at START + 30 days + 5 min its first five minutes are gone
        _tick(writes, START + RETENTION_S + 300.0)
        with transaction(sessions, reads_only=True) as s:
            oldest = s.scalar(select(func.min(DecisionRow.timestamp)))
        assert oldest == START + 300.0
        assert _counts(sessions)["findings"] == 1  # closed at START + 600: kept
        _tick(writes, START + RETENTION_S + 1000.0)  # the next prune, an hour's period later on this clock
        assert _counts(sessions)["findings"] == 1  # not due yet (prune_every_s)
        _tick(writes, START + RETENTION_S + 300.0 + HOUR_S)
        with transaction(sessions, reads_only=True) as s:
            assert s.scalar(select(func.min(DecisionRow.timestamp))) >= START + HOUR_S  # the whole hour gone
        assert (_counts(sessions)["findings"], _counts(sessions)["drain_actions"]) == (0, 0)
    finally:
        engine.dispose()
