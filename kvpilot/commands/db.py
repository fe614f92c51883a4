"""`kvpilot db upgrade|downgrade|current`: the store's schema, through the Alembic migrations only.

A bad configuration or a database URL that is not one exits 2 (kvpilot.cli says so in one line); so do an unknown
revision and a SQLite file that does not exist for `current` and `downgrade`, which read it and create nothing. A
database that fails once reached exits 1.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

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


def _revision_shown(rev: str | None) -> str:
    """A schema revision as printed: as it is when it is printable text (every revision kvpilot writes), else quoted
    and escaped, as migrations' refusal names it. One a hand or another program stored may hold terminal control
    characters: printed raw, `\\x1b]0;...\\x07` retitled the operator's terminal and `\\x1b[2J` cleared it."""
    if rev is None:
        return "base (empty)"
    return rev if rev.isprintable() else repr(rev)


def _redacted(url: str) -> str:
    from store.db import url_shown

    return url_shown(url)


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


class _StepsBack(TyperCommand):
    """`kvpilot db downgrade -1`, as its help says: a relative revision (-N) is the argument, not an unknown option
    (click said "No such option: -1", and only `downgrade -- -1` worked)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click's Context
        steps = [a for a in args if re.fullmatch(r"-\d+", a)]
        if "--" not in args and len(steps) == 1:
            args = [a for a in args if a != steps[0]] + ["--", steps[0]]
        return super().parse_args(ctx, args)


def _revision(revision: str) -> str:
    """An empty revision was Alembic's bare AssertionError (exit 1)."""
    if not revision.strip():
        typer.echo("error: the revision is empty: give head, base, an id (`kvpilot db current`) or +N/-N", err=True)
        raise typer.Exit(2)
    return revision


@app.command()
def upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head", config: Config = None) -> None:
    """Upgrade the schema (default: to the newest revision)."""
    import migrations

    revision = _revision(revision)
    url = _url(config)
    try:
        migrations.upgrade(url, revision)
    except Exception as e:
        raise _fail("upgrading", url, e) from None
    typer.echo(f"{_redacted(url)} is at {_revision_shown(migrations.current(url))}")


# Where SQLite's unix VFS locks a WAL store's -shm file: every connection holds a shared lock on this byte (the "DMS"
# slot, https://www.sqlite.org/walformat.html) while it is open, so a lock there held by another process is a process
# with the store open. struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (padded to 32 bytes).
_SHM_DMS_BYTE = 128
_FLOCK = "hhqqi4x"


def _sqlite_holder(url: str) -> int | None:
    """The pid of a process that has the SQLite store at ``url`` open, if any (None: none, not SQLite, or no way to
    tell). F_GETLK only asks: it takes no lock, and no connection of this process is open on the file (closing a
    descriptor would drop this process's own locks on it)."""
    import fcntl
    import os
    import struct

    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:  # not a URL: the downgrade says so, as a StoreConfigError
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    try:
        fd = os.open(f"{parsed.database}-shm", os.O_RDONLY)
    except OSError:  # no -shm file: no connection open in WAL mode
        return None
    try:
        ask = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, _SHM_DMS_BYTE, 1, 0)
        kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, ask))
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def _postgres_clients(url: str) -> list[str]:
    """The other client connections to the PostgreSQL database at ``url`` (a running kvpilot keeps its pooled ones
    open), as "role@address (application)"; none for SQLite or where the server cannot be asked."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from store.db import make_engine

    try:
        if make_url(url).get_backend_name() != "postgresql":
            return []
    except Exception:  # not a URL: the downgrade says so, as a StoreConfigError
        return []
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    # client_addr is NULL for a Unix socket, and for another role's session where this one lacks
                    # pg_read_all_stats: both read as a local socket or a hidden address, never a wrong one
                    "SELECT coalesce(host(client_addr), 'local socket or address hidden'), usename, application_name "
                    "FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                )
            ).all()
    except SQLAlchemyError:  # the downgrade itself says why the database cannot be reached
        return []
    finally:
        engine.dispose()
    return sorted(f"{user}@{addr}" + (f" ({app})" if app else "") for addr, user, app in rows)


def _in_use(url: str) -> str | None:
    """What shows that a process (a running kvpilot) has the store open, in words; None when nothing does."""
    pid = _sqlite_holder(url)
    if pid is not None:
        return f"the file is open in process {pid}"
    clients = _postgres_clients(url)
    if clients:
        shown = ", ".join(clients[:5]) + (f" and {len(clients) - 5} more" if len(clients) > 5 else "")
        return f"{len(clients)} other connection{'s' if len(clients) > 1 else ''} to the database: {shown}"
    return None


@app.command(cls=_StepsBack)
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision: -1 for one step, base for empty.")] = "-1",
    config: Config = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Downgrade even while another process has the store open (a running kvpilot run)."
        ),
    ] = False,
) -> None:
    """Downgrade the schema (default: one revision). Refused while another process has the store open: a running
    kvpilot needs the newest schema (its store changes fail with 503 until `kvpilot db upgrade`), and restarted it
    upgrades the store again (store.auto_migrate; down to base, an empty schema, it does so without a restart). Stop
    every instance first, or pass --force."""
    import migrations

    revision = _revision(revision)
    url = _url(config)
    _refuse_missing(url)
    busy = _in_use(url)
    if busy is not None and not force:
        typer.echo(
            f"error: not downgrading {_redacted(url)}: {busy}. A kvpilot running on it needs the newest schema (its "
            "store changes would fail with 503 until `kvpilot db upgrade`); stop every instance first, or pass --force",
            err=True,
        )
        raise typer.Exit(2)
    if busy is not None:
        typer.echo(f"warning: downgrading {_redacted(url)} although {busy} (--force)", err=True)
    try:
        migrations.downgrade(url, revision)
    except Exception as e:
        raise _fail("downgrading", url, e) from None
    typer.echo(f"{_redacted(url)} is at {_revision_shown(migrations.current(url))}")


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
    head = migrations.head()
    if rev is not None and rev not in migrations.revisions():  # not "newest is 0004", as if 0005 were behind it
        state = f"unknown to this kvpilot, whose newest is {head}: a newer kvpilot wrote it"
    else:
        state = "newest" if rev == head else f"newest is {head}"
    typer.echo(f"{_redacted(url)}{default} is at {_revision_shown(rev)} ({state})")
