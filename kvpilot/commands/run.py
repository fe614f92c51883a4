"""`kvpilot run`: the control loop, the HTTP API and the KEDA gRPC server in one process.

With no configuration it runs against an embedded default (a SQLite file under the data folder, the built-in
simulator as its fleet) so that a new user sees it work at once; `--config` points it at a real fleet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="YAML settings file (KVPILOT_* variables override it). With neither: the built-in simulator is "
            "the fleet, the store a SQLite file under ~/.local/share/kvpilot, the API open (no tokens) on 127.0.0.1.",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=0, max=65535, help="HTTP port (default: api.http_port, 8080; also KVPILOT_HTTP_PORT)."
        ),
    ] = None,
) -> None:
    """Run kvpilot: collect, detect, decide, persist and publish every tick; serve the API and KEDA."""
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from kvpilot.settings import SettingsError, load_settings
    from store.db import StoreConfigError
    from store.errors import driver_words

    overrides = {"api": {"http_port": port}} if port is not None else {}
    url = ""
    try:
        settings = load_settings(config, **overrides)
        url = settings.database_url
        _refuse_memory_store(url)
        # The service (FastAPI, gRPC, the collector) is imported only for settings that hold: a bad file is told
        # at once, not after ~2 s of imports.
        from kvpilot.runtime import event_loop
        from kvpilot.runtime.runner import run

        # on the loop runtime.event_loop names (asyncio's by default, or uvloop); the log line at start says which
        raise typer.Exit(event_loop.run(run(settings, config_file=config), settings.runtime.event_loop))
    except (SettingsError, StoreConfigError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except CommandError as e:  # the schema upgrade at start: a database a newer kvpilot wrote
        typer.echo(f"error: the store cannot be prepared: {driver_words(e)}", err=True)
        raise typer.Exit(2) from None
    except SQLAlchemyError as e:  # the schema upgrade at start needs the database: say which and why, in a line
        typer.echo(f"error: the store cannot be prepared: {driver_words(e)}{_which(url)}", err=True)
        raise typer.Exit(1) from None
    except OSError as e:  # an unwritable data_dir and the like
        where = f" {e.filename}" if e.filename else ""
        typer.echo(f"error: {e.strerror or e}{where}", err=True)
        raise typer.Exit(1) from None


def _refuse_memory_store(url: str) -> None:
    """A SQLite database in memory (``sqlite:///:memory:``, ``sqlite://``) is one per connection: the schema upgrade
    and each of the store's threads would each open an empty one of its own, so every write failed with "no such
    table" while the process ran on as if stored. Refused before anything starts (`StoreConfigError`)."""
    from sqlalchemy.engine import make_url

    from collector.urls import password_masked
    from store.db import StoreConfigError

    try:
        parsed = make_url(url)
    except Exception:  # the engine says why at start, as for any URL it cannot read
        return
    if parsed.get_backend_name() == "sqlite" and (parsed.database or "") in ("", ":memory:"):
        raise StoreConfigError(
            f"database URL {password_masked(url)!r} is a SQLite database in memory, one per connection: kvpilot's "
            "store threads would each see an empty one; give a file, e.g. sqlite:////var/lib/kvpilot/kvpilot.db"
        )


def _which(url: str) -> str:
    """Which store, without a password; for a SQLite file whose folder cannot be written, that too (SQLite's own
    words are "unable to open database file": it writes the -wal and -shm files beside the store)."""
    import os

    from sqlalchemy.engine import make_url

    from store.db import url_shown

    try:
        parsed = make_url(url)
    except Exception:
        return ""
    shown = url_shown(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:"):
        folder = Path(database).resolve().parent
        if folder.is_dir() and not os.access(folder, os.W_OK):
            return f" ({shown}: its folder {folder} is read-only, and SQLite writes its -wal and -shm files there)"
    return f" ({shown})"
