"""The SQLite engine: connections reused across units of work, yet a store moved away is noticed at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.exc import OperationalError

import migrations
from scaler.decision import Decision
from store import repo
from store.db import make_engine, session_factory, transaction
from store.models import DecisionRow


def _opened(engine: Engine) -> list[object]:
    """Every DBAPI connection the engine opens from now on."""
    opened: list[object] = []
    event.listen(engine, "connect", lambda conn, _record: opened.append(conn))
    return opened


def _decisions(engine: Engine) -> int:
    with transaction(session_factory(engine)) as s:
        return s.scalar(select(func.count()).select_from(DecisionRow)) or 0


def _record(engine: Engine, t: float) -> None:
    with transaction(session_factory(engine)) as s:
        repo.record_decision(session=s, decision=Decision("a/x", t, 1, 1, 1, 0, "steady", "", None, None, {}))


def test_units_of_work_reuse_one_connection(db_url: str) -> None:
    engine = make_engine(db_url)
    opened = _opened(engine)
    for t in range(20):
        _record(engine, t)
        assert _decisions(engine) == t + 1
    assert len(opened) == 1  # 40 transactions one after another, one file open (a connection each before)
    engine.dispose()


def test_a_moved_store_is_noticed_at_the_next_use(tmp_path: Path) -> None:
    # The folder is replaced by a file, as in the service's outage tests: a pooled connection must not keep
    # reading and writing the moved file through its open descriptor.
    folder = tmp_path / "store"
    url = f"sqlite:///{folder / 'kvpilot.db'}"
    migrations.upgrade(url)
    engine = make_engine(url)
    _record(engine, 1)
    folder.rename(tmp_path / "hidden")
    folder.write_text("not a folder")
    with pytest.raises(OperationalError):
        _record(engine, 2)
    folder.unlink()
    (tmp_path / "hidden").rename(folder)
    _record(engine, 3)  # back: a fresh connection
    assert _decisions(engine) == 2
    engine.dispose()
