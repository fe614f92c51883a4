"""`kvpilot backtest` as a user runs it: the planner it prints is the one `config show` prints, the price comes from
settings, and a bad trace or policy name is refused with its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

# Ten minutes with a burst over the second half: enough for the planner to act, small enough for a unit test.
TRACE = (
    "synthetic:duration_s=600,rate=3,amplitude=0,bursts=1,burst_factor=4,burst_s=300,prompt_mean=4000,output_mean=100"
)
SHORT = "synthetic:duration_s=300,rate=2,amplitude=0"
TRACES = Path(__file__).resolve().parents[3] / "fixtures" / "traces"  # real traces' excerpts (README there)


def test_the_cli_and_config_show_print_the_same_planner(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # With the profile in the settings file, `config show` and the backtest print one and the same configuration.
    runner = CliRunner()
    settings = tmp_path / "kvpilot.yaml"
    settings.write_text(
        "scaler:\n  planner: {forecaster: holt, target_utilisation: 0.7, sizing: lean}\n"
        "  default:\n    max_replicas: 12\n    profile: {prefill_tokens_per_s: 30000, decode_step_s: 0.008,"
        " decode_tokens_per_s: 9000, kv_tokens: 400000}\n"
    )
    shown = runner.invoke(app, ["config", "show", "--config", str(settings), "--json"])
    assert shown.exit_code == 0, shown.output
    tested = runner.invoke(
        app,
        ["backtest", "--trace", TRACE, "--config", str(settings), "--policies", "kvpilot", "--no-frontier", "--json"],
    )
    assert tested.exit_code == 0, tested.output
    planner = json.loads(shown.output)["planner"]
    assert json.loads(tested.output)["kvpilot_config"] == planner
    assert planner["forecaster"] == "holt"
    assert planner["policy"]["max_replicas"] == 12
    # `sizing: lean`: one margin, and capacity learnt up to the full profile (1 / the target utilisation).
    assert planner["policy"]["headroom"] == "lean"
    assert planner["feedback_ceiling"] == pytest.approx(1 / 0.7)


def test_cli_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    missing = runner.invoke(app, ["backtest", "--trace", str(tmp_path / "nope.csv"), "--json", "--no-frontier"])
    assert missing.exit_code == 2
    assert "nope.csv" in missing.output
    bad = runner.invoke(app, ["backtest", "--trace", TRACE, "--policies", "reactive,nonsense"])
    assert bad.exit_code != 0
    assert "nonsense" in bad.output


def test_the_cli_prices_at_the_settings_price(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = tmp_path / "kvpilot.yaml"
    settings.write_text("cost:\n  gpus: {H100: {price_per_hour_usd: 10.0}}\n")
    argv = ["backtest", "--trace", SHORT, "--policies", "reactive", "--no-frontier", "--json", "-c", str(settings)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    numbers = out["policies"]["reactive"]
    assert out["cost"]["price_per_gpu_hour_usd"] == 10.0
    assert numbers["cost_usd"] == pytest.approx(round(numbers["replica_hours"] * 10.0, 2), abs=0.01)
    table = CliRunner().invoke(app, [*argv[:-3], "-c", str(settings)])
    assert table.exit_code == 0, table.output
    assert f"{numbers['cost_usd']:,.2f}" in table.output  # the table's cost column
    assert "$10 per GPU-hour" in table.output


def test_backtest_runs_on_the_burstgpt_excerpt() -> None:
    trace = str(TRACES / "burstgpt_1_head.csv")
    out = CliRunner().invoke(
        app, ["backtest", "--trace", trace, "--policies", "reactive,kvpilot", "--no-frontier", "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["trace"] == "burstgpt_1_head.csv"
    assert set(report["policies"]) == {"reactive", "kvpilot"}
    assert all(0.0 <= r["slo_attainment"] <= 1.0 for r in report["policies"].values())


def test_the_table_written_to_a_pipe_keeps_its_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rich assumes 80 columns off a terminal (or COLUMNS, which readline exports to child processes) and cut every
    # header ("outsi…", "repli…"); `kvpilot backtest > out.txt` must read as the terminal does.
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(app, ["backtest", "--trace", SHORT, "--policies", "reactive,kvpilot", "--no-frontier"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "policy" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")][:7] == [
        "policy",
        "in SLO",
        "outside SLO",
        "p50 TTFT s",
        "p99 TTFT s",
        "replica-h",
        "cost $",
    ]
    assert not any("…" in line for line in result.stdout.splitlines())
