"""`kvpilot backtest` reports dollars beside replica-hours: cost = replica-h × GPUs per replica × price per GPU-hour,
from the GPU type and price in settings (the simulated replica's H100 unless `cost.default` says otherwise)."""

from __future__ import annotations

import pytest

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


def test_the_frontier_is_priced_the_same_way() -> None:
    from scaler.backtest.frontier import Frontier, FrontierPoint
    from scaler.backtest.run import Report

    report = Report("t", "request", 3600.0, 10.0, gpu_type="H200", gpus_per_replica=2, price_per_gpu_hour_usd=3.5)
    report.frontier = Frontier((FrontierPoint(0.5, 1.0, 1.0), FrontierPoint(0.999, 2.8, 1.0)))
    for point in report.to_json()["frontier"]:
        assert point["cost_usd"] == pytest.approx(round(point["replica_hours"] * 2 * 3.5, 2))
