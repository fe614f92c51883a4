"""The demo's rollout: the fault it injects is the backtest's, `--no-surge` publishes the planner's count with the
surge withdrawn, the surge is read from the decisions, and the flags are refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from collector.clock import VirtualClock
from collector.state import FleetState
from kvpilot.cli import app
from kvpilot.demo.replay import DEFAULT_FAULTS, DemoConfig, DemoSummary
from kvpilot.demo.rollout import SurgeOff, rollout_body, surge_now
from scaler.backtest.sim import ROLLOUT_MODEL, rolled, rollout_fault
from scaler.decision import Decision
from scaler.rollout_stage import RolloutStage
from simulator import parse_fault
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service


def _decision(desired: int, reason: str = "predictive", **forecast: float) -> Decision:
    return Decision("inference/llama", 10.0, 3, 3, desired, 0, reason, "planned", forecast=forecast)


def test_the_rollout_injected_is_the_backtests() -> None:
    assert parse_fault(rollout_body(wave_size=2, speed=1.5)) == rollout_fault(wave_size=2, speed=1.5)


def test_the_rollout_joins_the_schedule_in_time_order_only_when_asked_for() -> None:
    assert DemoConfig().scheduled_faults() == list(DEFAULT_FAULTS)
    due = [f.fault["type"] for f in DemoConfig(rollout_at_s=1645).scheduled_faults()]
    assert due == ["xid", "routing", "rollout", "kv_pressure", "hung_gpu"]


@pytest.mark.parametrize(
    ("replicas", "done"),
    [
        ([("next", "ready"), ("next", "ready")], True),  # every replica on the new version and ready
        ([("next", "ready"), ("next", "loading")], False),  # a successor still loading
        ([("next", "ready"), ("old", "ready")], False),  # an old replica left
        ([], False),  # nothing serving is no finished rollout
    ],
)
def test_the_window_ends_once_every_replica_is_rolled_and_ready(replicas: list[tuple[str, str]], done: bool) -> None:
    names = {"next": ROLLOUT_MODEL, "old": "meta-llama/Meta-Llama-3-8B-Instruct"}
    assert rolled([SimpleNamespace(model_name=names[m], state=s) for m, s in replicas]) is done


def test_the_surge_is_what_the_stage_recorded_above_the_planner() -> None:
    decisions = {"a": _decision(5, "rollout_surge", rollout_surge=2.0), "b": _decision(3, rollout_surge=0.0)}
    assert surge_now(decisions) == 2
    assert surge_now({"c": _decision(3)}) == 0  # no rollout: no key


def test_surge_off_publishes_the_planners_count(monkeypatch: pytest.MonkeyPatch) -> None:
    planned = [_decision(3), _decision(4)]
    raised = [_decision(5, "rollout_surge", rollout_surge=2.0), _decision(4, "predictive", rollout_surge=0.0)]
    monkeypatch.setattr("scaler.rollout_stage.RolloutStage.apply", lambda *a, **k: raised)
    out = SurgeOff().apply(FleetState(), planned, 10.0)
    # the surged decision goes out at the planner's count and reason, saying so; the other is untouched
    assert [(d.desired_replicas, d.reason, d.forecast["rollout_surge"]) for d in out] == [
        (3, "predictive", 0.0),
        (4, "predictive", 0.0),
    ]
    assert "rollout surge of +2 not applied (--no-surge)" in out[0].message


@pytest.mark.parametrize("stage", [None, SurgeOff])
def test_build_service_makes_the_rollout_stage_it_is_given(tmp_path, stage: type[SurgeOff] | None) -> None:
    # `--no-surge` hands SurgeOff to build_service: the loop runs it from the start, on the detectors' thresholds,
    # and nothing is swapped after construction (the default stays the plain RolloutStage).
    clock = VirtualClock(START)
    service, _, _ = make_service(f"sqlite:///{tmp_path / 'kv.db'}", clock, ScriptedFleet(clock), rollout=stage)
    try:
        assert type(service.loop.rollout) is (stage or RolloutStage)
        assert service.loop.rollout.thresholds is service.loop.detection.thresholds
    finally:
        service.engine.dispose()


def test_without_a_rollout_the_summary_has_no_rollout_keys() -> None:
    assert "rollout" not in DemoSummary().to_json()
    assert "windows" not in DemoSummary().to_json()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--rollout-at", "-5"], "error: --rollout-at must be a finite number >= 0, got -5.0"),
        (["--rollout-at", "nan"], "error: --rollout-at must be a finite number >= 0, got nan"),
        # past the replay: nothing would roll
        (
            ["--rollout-at", "600", "--duration", "600"],
            "error: --rollout-at 600 is not within the replay (--duration 600)",
        ),
        (["--rollout-at", "60", "--rollout-speed", "0"], "error: --rollout-speed must be a finite number > 0, got 0.0"),
        (["--rollout-at", "60", "--forever"], "error: --rollout-at needs a replay of known length, not --forever"),
    ],
)
def test_bad_rollout_flags_are_refused_in_one_line(args: list[str], error: str) -> None:
    result = CliRunner().invoke(app, ["demo", *args])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == error


def test_a_rollout_wave_below_one_is_refused() -> None:
    result = CliRunner().invoke(app, ["demo", "--rollout-at", "60", "--rollout-wave", "0"])
    assert result.exit_code == 2
    with pytest.raises(ValueError, match="wave must be >= 1"):
        DemoConfig(rollout_at_s=60, rollout_wave=0)
