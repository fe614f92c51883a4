from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store.db import make_engine, session_factory
from tests.helpers.sqlite_store import copy_store, migrated

# `store`: a migrated SQLite file, and a real PostgreSQL database (marked integration), as the reliability suite's.
from tests.reliability.conftest import postgres, store  # noqa: F401


@pytest.fixture(scope="session")
def _migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The migrations run once; every test copies the result (tests/unit/store/test_db.py runs them itself)."""
    path = tmp_path_factory.mktemp("store-template") / "kvpilot.db"
    migrated(path)
    return path


@pytest.fixture
def db_url(tmp_path: Path, _migrated_store: Path) -> str:
    """A fresh store at head, this test's own."""
    return copy_store(_migrated_store, tmp_path / "kvpilot.db")


@pytest.fixture
def factory(db_url) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_url)
    yield session_factory(engine)
    engine.dispose()
