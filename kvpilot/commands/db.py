"""`kvpilot db upgrade|downgrade|current`: the store's schema, through the Alembic migrations only."""

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
    from kvpilot.settings import SettingsError, load_settings

    try:
        return load_settings(config)
    except SettingsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _fail(action: str, url: str, e: Exception) -> typer.Exit:
    typer.echo(f"error: {action} {_redacted(url)} failed: {str(e).splitlines()[0]}", err=True)
    return typer.Exit(1)


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
    try:
        rev = migrations.current(url)
    except Exception as e:
        raise _fail("reading", url, e) from None
    state = "newest" if rev == migrations.head() else f"newest is {migrations.head()}"
    typer.echo(f"{_redacted(url)}{default} is at {rev or 'base (empty)'} ({state})")
