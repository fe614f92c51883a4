"""`kvpilot backtest --fault`: a replica lost alike in every policy's replay, said in `--json` and the table; specs
it does not know, and times outside the replay, refused in words with exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

TRACE = "synthetic:duration_s=600,rate=12,amplitude=0,bursts=0,prompt_mean=3000,output_mean=150"
BASE = ["backtest", "--trace", TRACE, "--policies", "reactive,kvpilot"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--fault", "xid80@300"], "unknown fault"),
        (["--fault", "crash"], "unknown fault"),
        (["--fault", "xid79@0"], "after 0 s"),
        (["--fault-at", "-10"], "after 0 s"),
        (["--fault", "xid79@600"], "not within the replay"),
        (["--fault", "xid79@5000"], "not within the replay"),
        (["--fault", "xid79@100,replace=soon"], "seconds or 'never'"),
        (["--fault", "xid79@100", "--frontier"], "without faults"),
    ],
)
def test_bad_faults_exit_2_in_words(flags: list[str], words: str) -> None:
    out = CliRunner().invoke(app, [*BASE, "--json", *flags])
    assert out.exit_code == 2, out.output
    assert words in out.output
    assert "Traceback" not in out.output


def test_a_fault_at_the_peak_is_recorded_for_every_policy() -> None:
    out = CliRunner().invoke(app, [*BASE, "--json", "--fault-at", "peak"])  # no --no-frontier: off with a fault
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    (fault,) = report["faults"]
    assert fault["at"] == "peak"
    assert fault["kind"] == "xid79"
    assert fault["xid"] == 79
    assert 60.0 <= fault["at_s"] <= 600.0 - 120.0
    assert "frontier" not in report
    for name in ("reactive", "kvpilot"):
        (hit,) = report["policies"][name]["faults"]
        assert hit["at_s"] == fault["at_s"]
        assert hit["replaced_at_s"] == fault["at_s"] + 5.0


def test_the_table_says_what_each_fault_did() -> None:
    out = CliRunner().invoke(app, [*BASE, "--fault", "xid79@200,replace=never"])
    assert out.exit_code == 0, out.output
    assert "fault: xid79 at 200 s (asked), never replaced, in every policy's replay" in out.output
    assert "reactive: xid79 hit" in out.output
    assert "never replaced" in out.output


def test_without_a_fault_the_json_has_no_faults_key() -> None:
    out = CliRunner().invoke(app, [*BASE, "--json", "--no-frontier"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert "faults" not in report
    assert all("faults" not in p for p in report["policies"].values())


def test_a_fault_the_replay_ends_too_soon_after_is_said_in_the_table_and_the_json() -> None:
    # 10 s before the end: injected and recorded, its replacement never serves; both outputs say its cost is cut
    args = ["backtest", "--trace", TRACE, "--policies", "reactive", "--fault", "xid79@590"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    said = " ".join(table.output.split())  # the console wraps long lines
    assert "fault: xid79 at 590 s cut short: the replay ends 10 s after the fault, before its replacement" in said
    (fault,) = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)["faults"]
    assert fault["replay_left_s"] == 10.0
    assert fault["cut_short"].startswith("the replay ends 10 s after the fault, before its replacement could serve")
