"""`kvpilot backtest` reports dollars beside replica-hours: cost = replica-h × GPUs per replica × price per GPU-hour,
from the GPU type and price in settings (the simulated replica's H100 unless `cost.default` says otherwise)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from scaler.backtest.run import BacktestConfig, backtest
from scaler.cost import DEFAULT_GPU_PRICES, GpuPrice

TRACE = "synthetic:duration_s=300,rate=2,amplitude=0"


def test_cost_is_replica_hours_times_gpus_times_price() -> None:
    cfg = BacktestConfig(policies=("reactive",), frontier=False, gpu_type="A100", gpus_per_replica=2)
    report = backtest(TRACE, cfg)
    hours = report.policies["reactive"].replica_hours
    out = report.to_json()
    assert out["cost"] == {"gpu_type": "A100", "gpus_per_replica": 2, "price_per_gpu_hour_usd": 1.39}
    assert out["policies"]["reactive"]["cost_usd"] == pytest.approx(round(hours * 2 * 1.39, 2))
    # unset: the simulated replica's own GPU (one H100) at the default price
    default = backtest(TRACE, BacktestConfig(policies=("reactive",), frontier=False)).to_json()
    assert default["cost"]["gpu_type"] == "H100"
    assert default["cost"]["price_per_gpu_hour_usd"] == DEFAULT_GPU_PRICES["H100"].price_per_hour_usd


def test_an_unpriced_gpu_type_is_refused() -> None:
    with pytest.raises(ValueError, match="GPU type 'B200' has no price"):
        BacktestConfig(gpu_type="B200")
    with pytest.raises(ValueError, match="has no price"):
        BacktestConfig(gpu_type="H100", gpu_prices={"L4": GpuPrice(0.4, 72)})


def test_the_cli_prices_at_the_settings_price(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = tmp_path / "kvpilot.yaml"
    settings.write_text("cost:\n  gpus: {H100: {price_per_hour_usd: 10.0}}\n")
    argv = ["backtest", "--trace", TRACE, "--policies", "reactive", "--no-frontier", "--json", "-c", str(settings)]
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


def test_the_frontier_is_priced_the_same_way() -> None:
    from scaler.backtest.frontier import Frontier, FrontierPoint
    from scaler.backtest.run import Report

    report = Report("t", "request", 3600.0, 10.0, gpu_type="H200", gpus_per_replica=2, price_per_gpu_hour_usd=3.5)
    report.frontier = Frontier((FrontierPoint(0.5, 1.0, 1.0), FrontierPoint(0.999, 2.8, 1.0)))
    for point in report.to_json()["frontier"]:
        assert point["cost_usd"] == pytest.approx(round(point["replica_hours"] * 2 * 3.5, 2))
