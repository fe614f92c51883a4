"""Every `kvpilot COMMAND --option` the pages write (in code spans and shell blocks) names a command and options the
CLI has, so a reader who copies one is not told `No such option`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer.main
from typer._click import exceptions as click_exceptions

from kvpilot.cli import app
from scaler.backtest.policies import POLICIES

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


# Every fenced block but data (```yaml, ```json, …) holds commands a reader may copy: ```sh and bare ``` blocks.
_DATA_FENCES = ("yaml", "yml", "json", "python", "py", "promql", "text", "toml", "proto", "go")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# A whole command line: `kvpilot …` (or `.venv/bin/kvpilot …`) to the end of the line or a shell comment.
_LINE = re.compile(r"^(?:[\w./-]*/)?kvpilot ([a-z][a-z-]*)(.*)$")


def _command_lines(text: str) -> list[str]:
    """The `kvpilot …` lines of a page's command blocks, continuation lines joined, comments cut."""
    lines = []
    for lang, body in _FENCE.findall(text):
        if lang in _DATA_FENCES:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#\s", " " + line.strip() + " ", maxsplit=1)[0].strip()
            if _LINE.match(line):
                lines.append(line)
    return lines


def _words(line: str) -> tuple[str, list[str]]:
    """The command and its arguments as the reader types them: an optional part (`[--json]`) is typed, the first of
    alternatives (`request|fluid`) is chosen."""
    m = _LINE.match(line)
    assert m is not None
    rest = re.sub(r"(?<![\w\]])\[|\](?![\w\[])", " ", m.group(2))  # [--json] -> --json; a JSON value's brackets stay
    words = [w.split("|")[0] for w in shlex.split(rest)]
    return m.group(1), words


def _refused(line: str) -> str | None:
    """Why the CLI refuses ``line`` before running anything (its parser, and the names it checks first), or None."""
    name, words = _words(line)
    command = CLI.commands.get(name)
    if command is None:
        return f"no command {name!r}"
    if words and hasattr(command, "commands"):  # a group: `kvpilot db upgrade`
        sub = command.commands.get(words[0])
        if sub is None:
            return f"no command {name} {words[0]!r}"
        command, words = sub, words[1:]
    try:
        ctx = command.make_context(name, list(words))
    except click_exceptions.ClickException as e:
        return e.format_message()
    policies = ctx.params.get("policies")
    if name == "backtest" and policies:
        unknown = [p for p in policies.split(",") if p.strip() not in POLICIES]
        if unknown:
            return f"--policies: no policy {unknown}; known: {', '.join(POLICIES)}"
    return None


def test_the_parse_check_catches_what_the_cli_refuses() -> None:
    page = "```sh\nkvpilot demo --seed two\n.venv/bin/kvpilot detect --json   # no --source\n```\n"
    page += "```\nkvpilot backtest --trace t.csv --policies reactive,kvpilot2\n"
    page += "kvpilot simulate --trace t.csv --virtual\n```"
    refused = [_refused(line) or "" for line in _command_lines(page)]
    assert "--seed" in refused[0]
    assert "--source" in refused[1]
    assert "kvpilot2" in refused[2]
    assert refused[3] == ""
    assert _words("kvpilot gpu-agent [--port 9400] [--once]") == ("gpu-agent", ["--port", "9400", "--once"])
    assert _words("kvpilot simulate --virtual [--fidelity request|fluid]")[1] == ["--virtual", "--fidelity", "request"]


def test_every_command_line_the_pages_show_parses() -> None:
    # The option-name check above reads code spans, whose commands are often fragments (`kvpilot backtest --pools`
    # in a sentence); a line in a command block is what a reader runs, so it must parse whole: its options, their
    # values' types, its required arguments, and the policy names `kvpilot backtest` checks before replaying.
    lines = [(page, line) for page in PAGES for line in _command_lines(page.read_text())]
    assert len(lines) >= 12, lines  # the blocks were found at all
    refused = [f"{page.relative_to(REPO)}: `{line}`: {why}" for page, line in lines if (why := _refused(line))]
    assert not refused, "command lines the CLI refuses:\n" + "\n".join(refused)
