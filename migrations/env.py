"""Alembic environment: the URL is the one the caller set on the Config (``migrations.alembic_config(url)``, which
`kvpilot db` and `kvpilot run` fill from kvpilot's settings) or, run by hand, alembic's ``-x url=...``; SQLite runs
in batch mode so ALTERs work there too. The schema history reads no settings of its own: migrations/ imports
nothing of kvpilot/."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from store.db import make_engine
from store.models import Base

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or context.get_x_argument(as_dictionary=True).get("url")
    if url:
        return url
    raise RuntimeError(
        "no database URL: run `kvpilot db upgrade` (it reads kvpilot's settings), or give alembic one: "
        "alembic -c migrations/alembic.ini -x url=sqlite:///kvpilot.db upgrade head"
    )


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
