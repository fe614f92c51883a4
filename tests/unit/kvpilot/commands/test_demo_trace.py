"""`kvpilot demo --trace` with a trace the demo cannot replay: one line and exit 2, before any fleet starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app


@pytest.mark.timeout(60)
def test_a_trace_too_large_for_the_request_level_is_refused_in_a_line(tmp_path: Path) -> None:
    # One ServeGen client at 100,000 requests/s (the most a window may hold): ×8 (the demo's default rate scale) for
    # 60 s is 48 M requests. The simulator's refusal was raised outside the demo's trace check: a traceback, exit 1.
    (tmp_path / "chunk-0-trace.csv").write_text("0,100000,1.0,Exponential,0,0\n")
    result = CliRunner().invoke(app, ["demo", "--trace", str(tmp_path), "--json", "--port", "0", "--duration", "60"])
    assert result.exit_code == 2, result.output
    assert "holds 48,000,000 requests: too many for the request level" in result.output
    assert "a smaller --rate-scale (now 8) or --duration" in result.output


@pytest.mark.timeout(60)
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    result = CliRunner().invoke(app, ["demo", "--trace", str(fifo), "--json", "--port", "0", "--duration", "60"])
    assert result.exit_code == 2, result.output
    assert "trace.jsonl: not a regular file" in result.output


@pytest.mark.timeout(120)
def test_the_header_says_how_much_the_trace_asks_for(tmp_path: Path) -> None:
    # A trace of one's own is sized with --rate-scale against the two starting replicas (README): the header says
    # its requests, span and mean rate as replayed (scale applied), and shows a span in the wrong unit at once.
    trace = tmp_path / "mine.csv"
    trace.write_text("Timestamp,Model,Request tokens,Response tokens\n0,m,400,50\n150,m,400,50\n300,m,400,50\n")
    argv = ["demo", "--trace", str(trace), "--speed", "0", "--port", "0", "--rate-scale", "1"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("kvpilot demo — mine.csv ×1: 3 requests over 300 s (0.01 req/s on average), seed 0, ")
