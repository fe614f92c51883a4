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
        Path | None, typer.Option("--config", "-c", help="YAML settings file (KVPILOT_* variables override it).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=0, max=65535, help="HTTP port (also KVPILOT_HTTP_PORT).")
    ] = None,
) -> None:
    """Run kvpilot: collect, detect, decide, persist and publish every tick; serve the API and KEDA."""
    import asyncio

    from kvpilot.runner import run
    from kvpilot.settings import SettingsError, load_settings

    overrides = {"api": {"http_port": port}} if port is not None else {}
    try:
        settings = load_settings(config, **overrides)
        raise typer.Exit(asyncio.run(run(settings, config_file=config)))
    except SettingsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
