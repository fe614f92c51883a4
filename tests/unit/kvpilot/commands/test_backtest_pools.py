"""`kvpilot backtest --pools` as a user runs it: the disaggregated replays of scaler.backtest.disagg (bench/disagg.py's
fleet) on a short slice, every policy priced at the settings' GPU prices, and its flags refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

# Three minutes of long prompts: past the 60 s warm-up, so both pooled policies decide; small enough for a unit test.
SLICE = "synthetic:duration_s=180,rate=2,amplitude=0,prompt_mean=4000,output_mean=100"


def _pools(*argv: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(app, ["backtest", "--pools", "--trace", SLICE, "--json", *argv])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["pools"]  # type: ignore[no-any-return]


def test_pools_prices_every_policy_at_its_pools_gpus(tmp_path: Path) -> None:
    # Both pooled policies and the co-located kvpilot, each with dollars = its pools' replica-hours x their GPU's
    # price, at the settings' price (H200 made dear here) where the settings file sets one.
    settings = tmp_path / "kvpilot.yaml"
    settings.write_text("cost:\n  gpus: {H200: {price_per_hour_usd: 10.0}}\n")
    out = _pools("-c", str(settings))
    assert set(out["policies"]) == {"kvpilot-colocated", "kvpilot", "dynamo-sla"}
    assert out["gpus"] == {"prefill": "H100", "decode": "H200", "both": "H100"}
    assert out["price_per_gpu_hour_usd"] == {"H100": 2.69, "H200": 10.0}
    assert out["frontier"] is None  # only with --frontier: the two-pool search is slow
    for key in ("kvpilot", "dynamo-sla"):
        p = out["policies"][key]
        h = p["replica_hours"]
        assert set(h) == {"prefill", "decode"}
        assert p["cost_usd"] == pytest.approx(h["prefill"] * 2.69 + h["decode"] * 10.0, abs=0.01)
        assert 0.0 <= p["slo_attainment"] <= 1.0
    both = out["policies"]["kvpilot-colocated"]
    assert both["cost_usd"] == pytest.approx(both["replica_hours"]["both"] * 2.69, abs=0.01)


def test_pools_gpu_types_and_no_colocated() -> None:
    # --decode-gpu A100 prices decode at the A100's default; --no-colocated leaves the co-located run out.
    out = _pools("--decode-gpu", "A100", "--no-colocated")
    assert set(out["policies"]) == {"kvpilot", "dynamo-sla"}
    assert out["gpus"]["decode"] == "A100"
    h = out["policies"]["kvpilot"]["replica_hours"]
    assert out["policies"]["kvpilot"]["cost_usd"] == pytest.approx(h["prefill"] * 2.69 + h["decode"] * 1.39, abs=0.01)


REFUSED = [
    # an unknown GPU type is named with the known ones
    (["--pools", "--decode-gpu", "B200"], "decode GPU type 'B200' unknown: one of A100, H100, H200, L4"),
    (["--pools", "--prefill-gpu", "h100"], "prefill GPU type 'h100' unknown"),
    # number flags are checked as for every subcommand
    (["--pools", "--duration", "nan"], "--duration must be a finite number > 0, got nan"),
    (["--pools", "--rate-scale", "0"], "--rate-scale must be a finite number > 0"),
    # the co-located backtest's options that the pooled fleet does not take
    (["--pools", "--policies", "kvpilot", "--plot", "x.png"], "--policies, --plot with --pools"),
    (["--pools", "--slo-ttft", "1"], "--slo-ttft with --pools"),
    # the pools' options without --pools
    (["--decode-gpu", "A100"], "--decode-gpu applies to --pools only"),
    (["--no-colocated"], "--colocated/--no-colocated applies to --pools only"),
]


@pytest.mark.parametrize(("argv", "said"), REFUSED)
def test_pools_flags_are_refused_by_name(argv: list[str], said: str) -> None:
    result = CliRunner().invoke(app, ["backtest", "--trace", SLICE, *argv])
    assert result.exit_code == 2, result.output
    assert said in result.output


def test_a_missing_trace_is_named() -> None:
    result = CliRunner().invoke(app, ["backtest", "--pools", "--trace", "nope.jsonl", "--json"])
    assert result.exit_code == 2
    assert "nope.jsonl" in result.output


def test_the_bench_runs_the_package_replays() -> None:
    # bench/disagg.py adds cases and a table only: its replays are the ones `kvpilot backtest --pools` runs.
    from scaler.backtest import disagg
    from tests.helpers.bench import load_bench

    bench = load_bench("disagg")
    for name in ("KvpilotPools", "DynamoRule", "run_disaggregated", "measure_frontier", "replay_schedule"):
        assert getattr(bench, name) is getattr(disagg, name)


def test_pools_frontier_only_when_asked() -> None:
    # --frontier searches the two-pool frontier and gives each pooled policy its ratio to it (never below it).
    out = _pools("--frontier", "--no-colocated")
    assert out["frontier"], "no pair of schedules replayed"
    for key in ("kvpilot", "dynamo-sla"):
        assert out["policies"][key]["frontier_ratio"] >= 1.0 - 1e-3
