"""`store`: the database where findings, decisions and roll-ups are kept."""

from __future__ import annotations

from pydantic import Field, field_validator

from kvpilot.settings._section import _Section, url_or_unset


class StoreSettings(_Section):
    """Where findings, decisions and roll-ups are kept."""

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the store; unset or empty: a SQLite file under `data_dir` (blank, or white "
        "space around it, is refused).",
    )
    retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Findings, decisions, roll-ups and finished drains older than this are deleted, except at a start "
        "that would delete every row stored before it (a clock that far ahead cannot be told from a stop that long): "
        "then nothing is deleted until kvpilot has run this long or the clock is put right, said once in the log. "
        "A drain started within `drains.budget_window_s` is kept whatever this says (with a budget): the budget "
        "counts it.",
    )
    buffer_max_writes: int = Field(default=10_000, ge=1, description="Writes held while the store is unreachable.")
    auto_migrate: bool = Field(
        default=True,
        description="`kvpilot run` upgrades the schema to head at start (else: `kvpilot db upgrade`), and creates it "
        "again where the store answers without one for `recreate_after_s` while it runs (a database recreated empty, "
        "a SQLite file removed), as a restart would; its buffered writes then follow. So restore a dump or move a "
        "SQLite file aside only with every kvpilot stopped, or within `recreate_after_s`: `pg_restore` into a schema "
        "created meanwhile reports an error on every table and restores none of the rows of a table written "
        "meanwhile; writes taken into a SQLite file that the one moved back then replaces are lost "
        '(docs/quickstart.md, "Restoring a backup").',
    )
    recreate_after_s: float = Field(
        default=60.0,
        ge=0,
        description="With `auto_migrate`: how long a running kvpilot's store must answer without kvpilot's schema "
        "before it is created again (writes are held meanwhile, said once); a schema back within it (a restore, a "
        "SQLite file moved back) is kept, with the held writes written into it. 0: at once.",
    )
    probe_every_s: float = Field(
        default=2.0,
        gt=0,
        description=(
            "How often the store is asked a trivial query (`SELECT 1`), one at a time: `/readyz` and"
            " `kvpilot_store_up` read its latest answer, and a query outstanding for `store.hang_after_s` reads"
            " as a store that hangs. Keep it under the readiness probe's period (5 s in `deploy/`) so that each"
            " check reads a fresh answer."
        ),
    )
    hang_after_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "A probe or write outstanding this long reads as a store that hangs: `/readyz` answers 503 and"
            " `kvpilot_store_up` reads 0. Also the longest `kvpilot run` waits for the store's first answer at"
            " start and for its last flush at shutdown. Keep it above the slowest commit your database makes"
            " when healthy but loaded. (An API request waiting on the store ends at `api.request_timeout_s`.)"
        ),
    )

    @field_validator("database_url")
    @classmethod
    def _database_url_not_blank(cls, value: str | None) -> str | None:
        """`database_url` is a URL or unset, never blank"""
        return url_or_unset(value)
