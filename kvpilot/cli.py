"""The `kvpilot` command line. Each subcommand lives in its own module under kvpilot/commands/.

Command modules import heavy libraries inside their functions so that `kvpilot --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="kvpilot",
    help="Observability and predictive autoscaling for LLM inference fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# (command name, module under kvpilot.commands). Each module exposes `command` (a function) or `app`
# (a typer.Typer, for a group such as `kvpilot db upgrade`).
COMMANDS: list[tuple[str, str]] = [
    ("version", "version"),
    ("backtest", "backtest"),
    ("simulate", "simulate"),
    ("detect", "detect"),
    ("parse", "parse"),
    ("scrape", "scrape"),
    ("run", "run"),
    ("db", "db"),
    ("config", "config"),
    ("demo", "demo"),
    ("gpu-agent", "gpu_agent"),
]


def _register() -> None:
    for name, module_name in COMMANDS:
        module = importlib.import_module(f"kvpilot.commands.{module_name}")
        sub = getattr(module, "app", None)
        if isinstance(sub, typer.Typer):
            app.add_typer(sub, name=name)
        else:
            app.command(name)(module.command)


@app.callback()
def _root() -> None:
    """kvpilot: collect, forecast, detect and scale for LLM inference fleets."""


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
