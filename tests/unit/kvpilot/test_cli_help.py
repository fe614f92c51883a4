"""`kvpilot --help` lists every command with its summary on one line (typer keeps a docstring's line breaks in the
command list: backtest's and gpu-agent's read "…and each" / "policy's distance…" over three ragged lines)."""

from __future__ import annotations

import importlib
import inspect

from typer.testing import CliRunner

from kvpilot.cli import COMMANDS, app


def test_each_command_is_listed_with_its_summary_on_one_line() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    rows = [line.strip("│ ").strip() for line in result.output.splitlines()]
    for name, module_name in COMMANDS:
        command = getattr(importlib.import_module(f"kvpilot.commands.{module_name}"), "command", None)
        if command is None:  # a group (db, config): typer's own help line
            continue
        summary = " ".join(inspect.cleandoc(command.__doc__).split("\n\n", 1)[0].split())
        assert f"{name} {summary}" in {" ".join(row.split()) for row in rows}, (name, summary)
