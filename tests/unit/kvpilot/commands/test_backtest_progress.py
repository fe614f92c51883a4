"""`kvpilot backtest`'s progress: on stderr whenever the result is not --json, as lines when stderr is not a terminal
(a log, CI), and the frontier search's share done rising through its stages instead of jumping once per descent."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvpilot.cli import app
from tests.helpers.burst_backtest import BurstBacktest

SHORT = "synthetic:duration_s=300,rate=2,amplitude=0"


def test_progress_lines_go_to_stderr_unless_json() -> None:
    argv = ["backtest", "--trace", SHORT, "--policies", "reactive"]
    table = CliRunner().invoke(app, argv)
    assert table.exit_code == 0, table.output
    lines = table.stderr.splitlines()
    frontier = [int(line.split()[1]) for line in lines if line.startswith("frontier: ")]
    assert "reactive: 100 %" in lines
    assert frontier[-1] == 100
    assert frontier == sorted(set(frontier)), "each tenth once, rising"
    assert "frontier: " not in table.stdout  # the table's own output stays clean
    quiet = CliRunner().invoke(app, [*argv, "--json"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    assert json.loads(quiet.stdout)["frontier_points"]


def test_the_frontier_reports_its_share_done_rising_to_one(burst: BurstBacktest) -> None:
    seen = burst.frontier_progress  # a burst over the second half, backtested once a session: three prices descended
    assert seen == sorted(seen)
    assert seen[0] >= 0.0
    assert seen[-1] == 1.0
    # inside the descents (0.1 to 0.9 of the bar), not only at their ends: per window swept
    assert len({round(x, 6) for x in seen if 0.1 < x < 0.9}) > 20
