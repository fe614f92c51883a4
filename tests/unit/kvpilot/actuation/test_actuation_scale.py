"""Actuation modes: advisory and keda change nothing and say what would happen; the registry refuses unknown modes.

Direct actuation through deployments/scale is exercised against the fake API server in test_actuation_scale_direct.py.
"""

from __future__ import annotations

import logging

import pytest

from kvpilot.actuation.scale import ACTUATORS, AdvisoryActuator, ScaleSubresourceActuator, make_actuator
from tests.unit.scaler.keda.harness import decision

ADVISORY_CASES = [
    # desired + warm pool above the current count: "would scale"
    ("advisory", 3, 2, True, 5, "advisory: would scale llm/chat 3 -> 5 replicas (predictive)"),
    # warm pool left out on request
    ("advisory", 3, 2, False, 3, "advisory: would keep llm/chat 3 -> 3 replicas (predictive)"),
    # keda mode reads the same: KEDA acts on the published decision, kvpilot does not
    ("keda", 4, 0, True, 4, "keda: would keep llm/chat 4 -> 4 replicas (predictive)"),
]


@pytest.mark.parametrize(("mode", "desired", "warm", "include_warm", "target", "message"), ADVISORY_CASES)
def test_advisory_modes_report_and_change_nothing(
    caplog: pytest.LogCaptureFixture, mode: str, desired: int, warm: int, include_warm: bool, target: int, message: str
) -> None:
    actuator = make_actuator(mode, include_warm_pool=include_warm)
    d = decision(desired=desired, warm=warm)
    with caplog.at_level(logging.INFO, logger="kvpilot.actuation.scale"):
        result = actuator.apply(d)
    assert (result.target_replicas, result.previous_replicas, result.applied, result.mode) == (
        target,
        d.current_replicas,
        False,
        mode,
    )
    assert result.message == message
    assert message in caplog.text


def test_unknown_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown scaling mode 'auto'; choose one of advisory, direct, keda"):
        make_actuator("auto")


def test_registry_builds_each_mode() -> None:
    built = {mode: make_actuator(mode, apps=object()) for mode in ACTUATORS}
    assert isinstance(built["advisory"], AdvisoryActuator)
    assert isinstance(built["keda"], AdvisoryActuator)
    assert isinstance(built["direct"], ScaleSubresourceActuator)


def test_direct_needs_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        make_actuator("direct", apps=object(), max_attempts=0)
