"""The `kvpilot` command line. Each subcommand lives in its own module under kvpilot/commands/.

Command modules import heavy libraries inside their functions so that `kvpilot --help` stays fast.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import typer
from typer.core import TyperGroup

# Exceptions that mean "the user's input is wrong", by module and name: any command that lets one through exits 2
# with its message on one line (a settings error lists its fields below that line), never with a traceback. Looked
# up in sys.modules, so `kvpilot --help` imports none of them; one whose module was never imported was not raised.
USER_ERRORS: tuple[tuple[str, str], ...] = (
    ("kvpilot.settings.sources", "SettingsError"),  # the YAML file, the KVPILOT_* environment
    ("store.db", "StoreConfigError"),  # a database URL that cannot be used at all
)


def _user_error(e: BaseException) -> bool:
    for module_name, class_name in USER_ERRORS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(e, getattr(module, class_name)):
            return True
    return False


class _Group(TyperGroup):
    """The root command: the one place where a user error that a command did not handle itself becomes
    ``error: …`` on stderr and exit status 2."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as e:
            if not _user_error(e):
                raise
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    name="kvpilot",
    cls=_Group,
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
            app.command(name, short_help=_summary(module.command.__doc__))(module.command)


def _summary(doc: str | None) -> str | None:
    """A command's docstring's first paragraph on one line: the command list keeps a docstring's line breaks."""
    if not doc:
        return None
    return " ".join(inspect.cleandoc(doc).split("\n\n", 1)[0].split())


@app.callback()
def _root() -> None:
    """kvpilot: collect, forecast, detect and scale for LLM inference fleets."""


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
