"""`kvpilot backtest` says what it replays before replaying it: requests, span, mean rate and level on stderr (not
with --json, whose object carries "duration_s" and "requests"), so that a user's trace in the wrong unit or a
`--duration` past the trace's end shows at the start, not only in the table's title minutes later."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvpilot.cli import app

HEADER = "Timestamp,Model,Request tokens,Response tokens\n"


def _burstgpt(tmp_path: Path, times: list[int]) -> str:
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "".join(f"{t},m,400,50\n" for t in times))
    return str(path)


def test_a_trace_in_milliseconds_is_named_as_the_span_it_replays(tmp_path: Path) -> None:
    # BurstGPT's Timestamp is seconds; these five requests 0.6 s apart were written in milliseconds
    trace = _burstgpt(tmp_path, [0, 600, 1200, 1800, 2400])
    argv = ["backtest", "--trace", trace, "--policies", "reactive", "--no-frontier"]
    table = CliRunner().invoke(app, argv)
    assert table.exit_code == 0, table.output
    lines = table.stderr.splitlines()
    assert lines[0] == "mine.csv: 5 requests over 2,400 s (0.67 h, 0.00208 req/s on average), request level"
    assert lines[1].startswith("reactive: ")  # before the replay, not after it
    quiet = CliRunner().invoke(app, [*argv, "--json"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    out = json.loads(quiet.stdout)
    assert (out["duration_s"], out["requests"]) == (2400.0, 5)


def test_a_duration_past_the_traces_end_is_said(tmp_path: Path) -> None:
    trace = _burstgpt(tmp_path, list(range(0, 300, 2)))
    argv = ["backtest", "--trace", trace, "--policies", "reactive", "--no-frontier", "--start", "100"]
    result = CliRunner().invoke(app, [*argv, "--duration", "1000", "--rate-scale", "2"])
    assert result.exit_code == 0, result.output
    first = result.stderr.splitlines()[0]
    assert first.startswith("mine.csv: ")
    assert "at --rate-scale 2)" in first
    assert first.endswith("; --duration 1000 s runs past the trace's end: 198 s replayed")
    within = CliRunner().invoke(app, [*argv, "--duration", "100", "--json"])
    assert within.exit_code == 0, within.output
    out = json.loads(within.stdout)
    assert out["duration_s"] == 100.0
    assert out["requests"] == 50  # arrivals at 100, 102, ... 198 s


def test_a_start_past_the_traces_end_is_said_in_the_flags_words(tmp_path: Path) -> None:
    # was "start_s=5000.0 is past the end of the trace (298 s)": the library's parameter, not what was typed
    trace = _burstgpt(tmp_path, list(range(0, 300, 2)))
    result = CliRunner().invoke(app, ["backtest", "--trace", trace, "--start", "5000", "--no-frontier"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "error: mine.csv: start 5000 s is past the end of the trace (298 s)"


def test_one_request_is_one_request(tmp_path: Path) -> None:
    trace = _burstgpt(tmp_path, [0, 400])
    argv = ["backtest", "--trace", trace, "--policies", "reactive", "--no-frontier", "--duration", "300"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0].startswith("mine.csv: 1 request over 300 s (")
