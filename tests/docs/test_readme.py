"""README.md says what kvpilot reads and how to run it: every engine adapter is named in its summary, and every
command and option in its table of commands is one the CLI has."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from collector.engines import ENGINES
from kvpilot.cli import app
from scaler.policy import Demand, ReplicaPolicy, Step

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SUMMARY = README.split("\n## ", 1)[0]

# How the README's summary names each engine adapter (collector.engines.ENGINES); a new adapter needs its line here
# and its name in the summary, so a reader of the README learns that kvpilot reads it.
NAMED_AS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "trtllm": "TensorRT-LLM behind Triton",
    "trtllm-pytorch": "trtllm-serve",
    "llamacpp": "llama.cpp",
    "nim": "NVIDIA NIM",
    "mindie": "Huawei MindIE",
    "dynamo": "NVIDIA Dynamo",
}


def test_every_engine_adapter_is_named_in_the_summary() -> None:
    assert set(NAMED_AS) == set(ENGINES), "name the new adapter in NAMED_AS and in README.md's summary"
    summary = " ".join(SUMMARY.split())  # line breaks as spaces
    missing = sorted(name for name in NAMED_AS.values() if name not in summary)
    assert not missing, f"README.md's summary does not name {missing}"
    assert "Ray Serve LLM" in summary  # a stack, not an adapter: vLLM's names behind Ray's prefix


def _table_rows() -> list[tuple[str, list[str]]]:
    """(command, options) of each row of the README's table of commands."""
    table = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = []
    for cell in re.findall(r"^\| `kvpilot ([^`]+)` \|", table, re.M):
        words = cell.split()
        rows.append((words[0], re.findall(r"--[a-z][a-z-]*", cell)))
    return rows


def test_every_command_and_option_in_the_table_exists() -> None:
    cli = typer.main.get_command(app)
    commands = cli.commands  # type: ignore[attr-defined]
    rows = _table_rows()
    assert {command for command, _ in rows} == set(commands), "the table lists every command, and only those"
    for command, options in rows:
        group = commands[command]
        params = [p for c in getattr(group, "commands", {}).values() for p in c.params] or group.params
        known = {opt for p in params for opt in p.opts}
        unknown = [o for o in options if o not in known]
        assert not unknown, f"README.md: `kvpilot {command}` has no option {unknown}"


def test_the_quoted_decision_line_is_the_one_the_planner_writes() -> None:
    # README.md quotes a desired-replica line of the demo and says what `predictive` means. The line's text after
    # "desired 2 → 3" is the decision's reason and message (kvpilot/demo/replay.py writes `desired {before} →
    # {after} ({reason}): {message}`); the message comes from ReplicaPolicy._raw, so its form is checked here, and
    # the meaning the README gives: predictive when the forecast needs at least as many replicas as the queue and
    # arrivals (a tie included), reactive when they need more.
    def step(predictive: int, reactive: int) -> Step:
        demand = Demand(current_replicas=2, ready_replicas=2, capacity_rps=52.45, arrival_rate=40.0,
                        forecast_upper_rate=None, requests_waiting=0.0)  # fmt: skip
        return ReplicaPolicy._raw(demand, 52.45, predictive, reactive)

    first = step(3, 2)
    text = " ".join(README.split())
    assert f"`desired 2 → 3 ({first.reason}): {first.message}`" in text
    assert "predictive: the forecast needs at least as many replicas as the queue and arrivals do" in text
    assert step(6, 6).reason == "predictive"
    assert step(3, 4).reason == "reactive"
