"""`kvpilot simulate --virtual`: summaries, and exit code 2 with a clear message on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_virtual_json_summary_counts_every_request(traces_dir: Path) -> None:
    code, out, _ = _run("--trace", str(traces_dir / "azure2023_code.csv"), "--duration-s", "600", "--virtual",
                        "--json", "--replicas", "2")  # fmt: skip
    assert code == 0
    s = json.loads(out)
    assert s["requests"] == s["finished"] > 0
    assert 0 < s["ttft_s"]["p50"] <= s["ttft_s"]["p90"] <= s["ttft_s"]["p99"]
    assert 0 <= s["prefix_hit_rate"] < 1
    assert s["preemptions"] >= 0
    assert 0 <= s["kv_usage"]["max"] <= 1


def test_virtual_text_summary_and_fluid(traces_dir: Path) -> None:
    code, out, _ = _run("--trace", str(traces_dir / "mooncake_synthetic_trace.jsonl"), "--virtual",
                        "--fidelity", "fluid", "--replicas", "8")  # fmt: skip
    assert code == 0
    assert "fluid level" in out
    assert "TTFT" in out
    assert "prefix hit rate" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "/no/such/trace.csv", "--virtual"], "trace not found"),  # missing file
        (["--trace", "README.md", "--virtual"], "unknown trace format"),  # wrong kind of file
        (["--trace", "synthetic:rate=x", "--virtual"], "not a number"),  # bad synthetic spec
        (["--trace", "synthetic"], "exactly one of"),  # neither --serve nor --virtual
        (["--trace", "synthetic", "--virtual", "--serve", "0"], "exactly one of"),  # both
        (["--trace", "synthetic", "--virtual", "--profile", "gpt-5"], "unknown --profile"),  # unknown profile
        (["--trace", "synthetic", "--serve", "0", "--speed", "0"], "--speed"),  # no time
    ],
)
def test_bad_input_exits_2_naming_it(args: list[str], message: str) -> None:
    code, _, err = _run(*args)
    assert code == 2
    assert message in err


def test_bad_trace_content_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": "soon"}\n')
    code, _, err = _run("--trace", str(bad), "--virtual")
    assert code == 2
    assert "bad.jsonl:1" in err
