"""`kvpilot detect --source sim`: the detectors end to end over the simulator, through the real CLI."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvpilot.cli import app


def _events(args: list[str]) -> list[dict]:
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--json", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]


def test_injected_xid_79_opens_a_drain_finding_within_two_ticks():
    # XID 79 at t=100 drops the GPU from its exporter: a critical drain_node finding opens by t=105 (2 ticks).
    fault = json.dumps({"type": "xid", "node": "node-0", "gpu": 1, "xid": 79})
    events = _events(["--duration-s", "150", "--inject", f"{fault}@100"])
    drains = [e for e in events if e["event"] == "opened" and e["action"] == "drain_node"]
    assert [(e["subject"]["node"], e["severity"]) for e in drains] == [("node-0", "critical")]
    assert drains[0]["t"] <= 105


def test_healthy_simulated_fleet_opens_nothing_that_drains():
    # Without faults, nothing asks for a drain.
    events = _events(["--duration-s", "300"])
    assert [e for e in events if e["action"] == "drain_node"] == []


def test_bad_injection_is_refused_by_name():
    # A malformed --inject names itself.
    result = CliRunner().invoke(app, ["detect", "--source", "sim", "--inject", "{not json}"])
    assert result.exit_code != 0
    assert "--inject" in result.output
