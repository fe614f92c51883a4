"""`StepFreeTime`: a wall clock's readings with its steps taken out (the planner's time in the control loop)."""

from __future__ import annotations

import pytest

from collector.clock import StepFreeTime

START = 1_700_000_000.0


@pytest.mark.parametrize(
    ("walls", "monotonic", "expected"),
    [
        # no step: the wall time itself
        ([START, START + 5, START + 10], [0, 5, 10], [START, START + 5, START + 10]),
        # a step back of an hour: goes on 5 s a tick, an hour ahead of the wall time from there
        ([START, START + 5 - 3600, START + 10 - 3600], [0, 5, 10], [START, START + 5, START + 10]),
        # a step ahead of an hour: 5 s, not an hour and 5 s
        ([START, START + 3605, START + 3610], [0, 5, 10], [START, START + 5, START + 10]),
        # two steps add up; a step back that undoes one ends where the wall time is again
        ([START, START + 3605, START + 10, START + 15], [0, 5, 10, 15], [START, START + 5, START + 10, START + 15]),
        # slewing (NTP's gentle correction, 0.5 ms a second at most) is no step: the wall time
        ([START, START + 5.0025, START + 10.005], [0, 5, 10], [START, START + 5.0025, START + 10.005]),
    ],
)
def test_the_steps_are_taken_out(walls: list[float], monotonic: list[float], expected: list[float]) -> None:
    clock = StepFreeTime()
    assert [clock.at(w, m) for w, m in zip(walls, monotonic, strict=True)] == pytest.approx(expected, abs=1e-6)
