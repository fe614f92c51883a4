"""INSERT ... ON CONFLICT DO NOTHING in SQLite's and PostgreSQL's words, for rows that two kvpilots on one store may
both read as missing and insert in the same moment (an HA pair runs the loop twice; sharded instances read one node's
GPUs). A plain INSERT lost that race on the primary key, and the store writer dropped the loser's whole write as a bad
row. With it the loser inserts nothing, reads the winner's row back and updates it as it would any row it found.

On SQLite it also keeps the caller's transaction whole: pysqlite begins a transaction only at a write, so a savepoint
opened before any write (the old way of catching the duplicate) began the transaction itself and committed it at its
release, whatever the caller's transaction did next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_or_skip(session: Session, model: type[Any], key: Sequence[Any]) -> postgresql.Insert | sqlite.Insert:
    """An INSERT into ``model`` that skips a row whose ``key`` columns (its primary key) are stored already."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(model).on_conflict_do_nothing(index_elements=list(key))
    return sqlite.insert(model).on_conflict_do_nothing(index_elements=list(key))
