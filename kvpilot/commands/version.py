"""`kvpilot version`."""

from __future__ import annotations

from importlib.metadata import version

import typer


def command() -> None:
    """Print kvpilot's version."""
    typer.echo(version("kvpilot"))
