"""`store`: the database where findings, decisions and roll-ups are kept."""

from __future__ import annotations

from pydantic import Field

from kvpilot.settings._section import _Section


class StoreSettings(_Section):
    """Where findings, decisions and roll-ups are kept."""

    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the store; unset: a SQLite file under `data_dir`."
    )
    retention_days: float = Field(
        default=30.0, gt=0, description="Findings, decisions and roll-ups older than this are deleted."
    )
    buffer_max_writes: int = Field(default=10_000, ge=1, description="Writes held while the store is unreachable.")
    auto_migrate: bool = Field(
        default=True,
        description="`kvpilot run` upgrades the schema to head at start (else: `kvpilot db upgrade`).",
    )
