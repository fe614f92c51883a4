"""What kvpilot's planner reads as arrivals in a backtest (`kvpilot backtest --arrivals`). By default what
`kvpilot run` reads on Kubernetes without a gateway source (`collector.arrivals`, off by default): the engines'
estimate in FleetState and the engines' counters for the burst floor, through the very `Planner.decide` call the
control loop makes, so that a backtest figure is about the configuration a default user gets (issue 10: "the
backtest feeds the planner through the same input path as the live loop"). `gateway` reads the simulated router's
request counter as `kvpilot run` reads a gateway's (tests/unit/scaler/test_backtest_gateway.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.scale_view import ScaleView
from scaler.backtest.policies.kvpilot import DEPLOYMENT
from scaler.backtest.run import BacktestConfig, Report, backtest
from scaler.planner import Planner

# Five minutes of steady load: every tick decides.
TRACE = "synthetic:duration_s=300,rate=2,amplitude=0"


def _given(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments a call actually gave (``None`` is the planner's own default for each of them)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def _replay(monkeypatch: pytest.MonkeyPatch, **cfg: Any) -> tuple[Report, list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []
    real = Planner.decide

    def spy(self: Planner, state: Any, now: float, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(self, state, now, **kwargs)

    monkeypatch.setattr(Planner, "decide", spy)
    report = backtest(TRACE, BacktestConfig(policies=("kvpilot",), frontier=False, **cfg))
    assert calls
    return report, calls


def _loop_call() -> dict[str, Any]:
    """What `ControlLoop._decide` hands the planner on Kubernetes: the scale subresource's count, and the scale
    view's gateway rates, which no source fills there (``ScaleView.arrival_rates`` stays empty)."""
    seen: list[dict[str, Any]] = []
    planner = SimpleNamespace(decide=lambda state, now, **kwargs: seen.append(kwargs) or [])
    view = ScaleView(replicas={DEPLOYMENT: 2})
    rates = dict(view.arrival_rates)
    loop = SimpleNamespace(planner=planner, state=None)
    ControlLoop._decide(loop, 10.0, 10.0, current_replicas=dict(view.replicas), arrival_rates=rates or None)  # type: ignore[arg-type]
    (kwargs,) = seen
    return kwargs


def test_by_default_the_planner_is_called_as_the_control_loop_calls_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BacktestConfig().arrivals == "engines"
    report, calls = _replay(monkeypatch)
    loop = _given(_loop_call())
    assert set(loop) == {"current_replicas"}  # no gateway rate, no gateway count
    assert all(set(_given(kwargs)) == set(loop) for kwargs in calls), calls[:3]
    assert report.to_json()["arrivals"] == "engines"  # a figure says which input measured it


def test_an_unknown_input_is_refused() -> None:
    with pytest.raises(ValueError, match="arrivals must be one of engines, gateway"):
        BacktestConfig(arrivals="router")


def test_the_cli_names_the_input_it_measured() -> None:
    runner = CliRunner()
    argv = ["backtest", "--trace", TRACE, "--policies", "kvpilot", "--no-frontier", "--json"]
    default = runner.invoke(app, argv)
    assert default.exit_code == 0, default.output
    assert json.loads(default.output)["arrivals"] == "engines"
    gateway = runner.invoke(app, [*argv, "--arrivals", "gateway"])
    assert gateway.exit_code == 0, gateway.output
    assert json.loads(gateway.output)["arrivals"] == "gateway"
    bad = runner.invoke(app, [*argv, "--arrivals", "router"])
    assert bad.exit_code == 2
    assert "arrivals" in bad.output
    # the pooled replays' kvpilot reads the engines' estimate only: a gateway feed there is refused, not ignored
    pools = runner.invoke(app, ["backtest", "--trace", TRACE, "--pools", "--arrivals", "gateway", "--json"])
    assert pools.exit_code == 2
    assert "--arrivals with --pools" in pools.output
