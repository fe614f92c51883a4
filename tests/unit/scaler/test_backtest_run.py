"""The backtest end to end on the real simulator, on a short synthetic trace, and the CLI's JSON contract."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from scaler.backtest.run import BacktestConfig, backtest

# 20 minutes, a 4× burst: enough for every policy to scale, small enough for a unit test.
TRACE = (
    "synthetic:duration_s=1200,rate=3,amplitude=0,bursts=1,burst_factor=4,burst_s=300,prompt_mean=4000,output_mean=100"
)
KEYS = {"slo_attainment", "replica_hours", "p50_ttft_s", "p99_ttft_s", "scale_events"}


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return backtest(TRACE, BacktestConfig(policies=("reactive", "kvpilot", "oracle")))


def test_json_has_exactly_the_contract(report) -> None:  # type: ignore[no-untyped-def]
    out = report.to_json()
    assert set(out) == {"policies", "forecast"}
    assert set(out["policies"]) == {"reactive", "kvpilot", "oracle"}
    for numbers in out["policies"].values():
        assert set(numbers) == KEYS
        assert 0.0 <= numbers["slo_attainment"] <= 1.0
        assert numbers["replica_hours"] > 0
        assert numbers["p50_ttft_s"] <= numbers["p99_ttft_s"]
    assert set(out["forecast"]) == {"mase"}
    json.dumps(out, allow_nan=False)  # finite numbers only


def test_every_policy_replays_the_same_requests(report) -> None:  # type: ignore[no-untyped-def]
    assert len({r.requests for r in report.policies.values()}) == 1


def test_the_burst_makes_every_policy_scale(report) -> None:  # type: ignore[no-untyped-def]
    for name, r in report.policies.items():
        assert max(r.replicas) > r.replicas[0], name


def test_oracle_meets_the_slo_where_the_trace_allows(report) -> None:  # type: ignore[no-untyped-def]
    assert report.policies["oracle"].slo_attainment > report.policies["reactive"].slo_attainment


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policies": ("reactive", "magic")}, "unknown policies"),  # a typo names itself
        ({"fidelity": "exact"}, "fidelity"),  # only request or fluid
        ({"max_replicas": 0}, "max_replicas"),  # below the floor
        ({"slo_ttft_s": 0.0}, "slo_ttft_s"),  # an SLO of zero cannot be met
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BacktestConfig(**kwargs)  # type: ignore[arg-type]


def test_cli_json_and_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    missing = runner.invoke(app, ["backtest", "--trace", str(tmp_path / "nope.csv"), "--json"])
    assert missing.exit_code == 2
    assert "nope.csv" in missing.output
    bad = runner.invoke(app, ["backtest", "--trace", TRACE, "--policies", "reactive,nonsense"])
    assert bad.exit_code != 0
    assert "nonsense" in bad.output
