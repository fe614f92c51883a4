"""Every `kvpilot COMMAND --option` the pages write (in code spans and shell blocks) names a command and options the
CLI has, so a reader who copies one is not told `No such option`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from kvpilot.cli import app

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
CLI: Any = typer.main.get_command(app)
# `kvpilot WORD`, as far as the code span or the line goes
_USE = re.compile(r"(?<![\w./-])kvpilot ([a-z][a-z-]*)((?: [^`\n|]*)?)")


def _options(command: Any) -> set[str]:
    return {opt for p in command.params for opt in p.opts}


def _uses(text: str) -> list[tuple[str, str]]:
    """(command, the rest of its span) for each use of a kvpilot command in ``text``."""
    spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    return [(m.group(1), m.group(2)) for span in spans for m in _USE.finditer(span)]


def test_the_check_catches_an_unknown_option() -> None:
    assert _bad("`kvpilot parse page.txt --prefixes ray_`") == ["kvpilot parse: --prefixes"]
    assert _bad("`kvpilot scrape URL --prefix ray_ --json`") == []


def _bad(text: str) -> list[str]:
    bad = []
    for name, rest in _uses(text):
        command = CLI.commands.get(name)
        if command is None:
            continue  # prose such as "kvpilot itself", not a command
        words = rest.split()
        if words and words[0] in getattr(command, "commands", {}):  # a group: `kvpilot config show`
            command = command.commands[words[0]]
        known = _options(command)
        bad += [
            f"kvpilot {name}: {flag}" for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest) if flag not in known
        ]
    return bad


def test_every_option_the_pages_name_exists() -> None:
    uses = [(page, use) for page in PAGES for use in _uses(page.read_text())]
    assert len(uses) > 40  # the pattern finds the pages' commands at all
    bad = [f"{page.relative_to(REPO)}: {b}" for page in PAGES for b in _bad(page.read_text())]
    assert not bad, "options the CLI does not have:\n" + "\n".join(bad)
