"""`kvpilot config show`: the effective configuration of `kvpilot run` — the file, the KVPILOT_* environment and
the defaults merged — with the planner configuration every deployment gets, secrets masked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from collector.urls import password_masked

app = typer.Typer(help="Show the effective configuration.", no_args_is_help=True)


def effective(config: Path | None) -> dict[str, Any]:
    """Settings as `kvpilot run` would read them, plus ``planner`` (the default deployment's planner
    configuration) and ``planner_deployments`` (one per configured deployment)."""
    from kvpilot.runtime.wiring import planner_config
    from kvpilot.settings import load_settings

    settings = load_settings(config)
    out: dict[str, Any] = settings.model_dump(mode="json")  # SecretStr fields come out masked
    # URLs are plain strings: their passwords are masked here (a database URL's is a secret, docs/quickstart.md)
    store, discovery = out["store"], out["collector"]["discovery"]
    store["database_url"] = password_masked(store["database_url"])
    discovery["promql_url"] = discovery["promql_url"] and password_masked(discovery["promql_url"])
    out["planner"] = planner_config(settings, settings.scaler.default).to_json()
    out["planner_deployments"] = {
        key: planner_config(settings, scaling).to_json() for key, scaling in sorted(settings.scaler.deployments.items())
    }
    return out


@app.command("show")
def show(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML settings file (KVPILOT_* variables override it).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (default: YAML)")] = False,
) -> None:
    """Print the configuration `kvpilot run` would use, with the effective planner configuration."""
    data = effective(config)  # a SettingsError exits 2 in kvpilot.cli
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    import yaml

    typer.echo(yaml.safe_dump(data, sort_keys=True), nl=False)
