"""`kvpilot db upgrade|downgrade|current`: the store's schema, through the Alembic migrations only.

A bad configuration or a database URL that is not one exits 2 (kvpilot.cli says so in one line); so do an unknown
revision and a SQLite file that does not exist for `current` and `downgrade`, which read it and create nothing. A
database that fails once reached exits 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kvpilot.settings import Settings

app = typer.Typer(help="The store's schema (Alembic migrations in migrations/).", no_args_is_help=True)

Config = Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file (for the database URL).")]


def _url(config: Path | None) -> str:
    return _settings(config).database_url


def _settings(config: Path | None) -> Settings:
    from kvpilot.settings import load_settings

    return load_settings(config)  # a SettingsError exits 2 in kvpilot.cli


def _missing_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist (the engine would create it and its folder)."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL: make_engine says so, as a StoreConfigError
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    path = Path(parsed.database)
    return None if path.exists() else path


def _refuse_missing(url: str, default: str = "") -> None:
    """`current` and `downgrade` read a database: a mistyped path is said, not created empty."""
    from store.db import StoreConfigError

    missing = _missing_sqlite_file(url)
    if missing is not None:
        raise StoreConfigError(
            f"no database at {missing}{default}: the SQLite file does not exist (`kvpilot db upgrade` creates it)"
        )


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _fail(action: str, url: str, e: Exception) -> Exception:
    """The error to raise for ``e``: a StoreConfigError as it is (kvpilot.cli: exit 2); an unknown revision (Alembic's
    CommandError) exit 2; anything else from the database exit 1; each in one line naming the database."""
    from alembic.util.exc import CommandError

    from store.db import StoreConfigError
    from store.errors import driver_words

    if isinstance(e, StoreConfigError):
        return e
    typer.echo(f"error: {action} {_redacted(url)} failed: {driver_words(e)}", err=True)
    return typer.Exit(2 if isinstance(e, CommandError) else 1)


@app.command()
def upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head", config: Config = None) -> None:
    """Upgrade the schema (default: to the newest revision)."""
    import migrations

    url = _url(config)
    try:
        migrations.upgrade(url, revision)
    except Exception as e:
        raise _fail("upgrading", url, e) from None
    typer.echo(f"{_redacted(url)} is at {migrations.current(url) or 'base (empty)'}")


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision: -1 for one step, base for empty.")] = "-1",
    config: Config = None,
) -> None:
    """Downgrade the schema (default: one revision)."""
    import migrations

    url = _url(config)
    _refuse_missing(url)
    try:
        migrations.downgrade(url, revision)
    except Exception as e:
        raise _fail("downgrading", url, e) from None
    typer.echo(f"{_redacted(url)} is at {migrations.current(url) or 'base (empty)'}")


@app.command()
def current(config: Config = None) -> None:
    """Print which database was read (password hidden), the schema revision it is at, and whether it is the newest."""
    import migrations

    settings = _settings(config)
    url = settings.database_url
    # the default is easy to read by mistake (a forgotten -c or KVPILOT_DATABASE_URL): say so
    default = "" if settings.store.database_url else " (the default: no store.database_url or KVPILOT_DATABASE_URL)"
    _refuse_missing(url, default)
    try:
        rev = migrations.current(url)
    except Exception as e:
        raise _fail("reading", url, e) from None
    state = "newest" if rev == migrations.head() else f"newest is {migrations.head()}"
    typer.echo(f"{_redacted(url)}{default} is at {rev or 'base (empty)'} ({state})")
