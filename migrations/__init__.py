"""The store's schema history (Alembic) and the functions `kvpilot db` and the service use to apply it."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.db import make_engine

INI = Path(__file__).resolve().parent / "alembic.ini"


def alembic_config(url: str | None = None) -> Config:
    """Alembic's Config for migrations/alembic.ini; ``url`` overrides the one from kvpilot's settings."""
    cfg = Config(str(INI))
    cfg.set_main_option("script_location", str(INI.parent))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "-1") -> None:
    command.downgrade(alembic_config(url), revision)


def head() -> str:
    script = ScriptDirectory.from_config(alembic_config())
    rev = script.get_current_head()
    if rev is None:
        raise RuntimeError("migrations/versions holds no revision")
    return rev


def current(url: str) -> str | None:
    """The revision the database is at, or None for an empty database."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def is_at_head(url: str) -> bool:
    return current(url) == head()
