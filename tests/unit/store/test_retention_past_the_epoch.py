"""A retention longer than the store could hold keeps everything, said as nothing deleted (session 26, E).

``store.retention_days`` takes any finite number above 0. Where it reaches past the epoch (1e300 days, or 1e308,
whose seconds overflow to infinity: "keep everything"), the roll-ups' cutoff minute was an integer past 64 bits, or
NaN: the retention write failed at the first tick and every hour after, dropped with an ERROR ("Python int too large
to convert to SQLite INTEGER", "cannot convert float NaN to integer"), and a batch of the tick's writes was applied
one by one around it. Now the cutoff stops at the epoch: nothing is stamped before it. SQLite and a real
PostgreSQL."""

from __future__ import annotations

import logging

import pytest

from kvpilot.runtime.persist import TickWrites
from store.buffer import BufferedWriter
from store.db import make_engine, session_factory
from tests.reliability.conftest import Store
from tests.unit.store.test_retention_clock_ahead import (
    HISTORY,
    HOUR_S,
    START,
    _an_hour_of_history,
    _counts,
    _tick,
)


@pytest.mark.parametrize("days", [1e300, 1e308])
def test_a_retention_past_the_epoch_keeps_every_row_and_fails_no_write(
    store: Store, days: float, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(store.url)
    try:
        sessions = session_factory(engine)
        _an_hour_of_history(sessions)
        writer = BufferedWriter(sessions, max_pending=1000)
        writes = TickWrites(writer, retention_s=days * 86400.0, prune_every_s=HOUR_S, decision_heartbeat_s=60)
        with caplog.at_level(logging.INFO):
            for i in range(2):  # the first tick's retention pass and the next hour's
                _tick(writes, START + (2 + i) * HOUR_S)
        # before: 'store write retention failed and was dropped' at both passes
        assert writer.failed_total == 0, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert _counts(sessions) == {**HISTORY, "decisions": 62, "rollups": 62}
        passes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("retention: ")]
        assert passes == ["retention: {'decisions': 0, 'findings': 0, 'rollups': 0, 'drain_actions': 0}"] * 2
    finally:
        engine.dispose()
