"""The HPA arithmetic the `reactive` and `hpa-util` baselines rely on, case by case from the HPA's rules."""

from __future__ import annotations

import pytest

from scaler.backtest.hpa import HpaBehaviour, average_value_replicas, utilisation_replicas


@pytest.mark.parametrize(
    ("total", "target", "current", "expected"),
    [
        (50.0, 5.0, 4, 10),  # 50 waiting at 5 per replica: 10 replicas
        (21.0, 5.0, 4, 4),  # ratio 1.05: inside the 10 % tolerance, hold
        (0.0, 5.0, 3, 0),  # empty queue recommends 0 (min replicas applies later)
        (23.0, 5.0, 4, 5),  # ratio 1.15: outside the tolerance, ceil(23/5)
    ],
)
def test_average_value(total: float, target: float, current: int, expected: int) -> None:
    assert average_value_replicas(total, target, current) == expected


@pytest.mark.parametrize(
    ("ready", "unready", "current", "expected"),
    [
        ([1.0, 1.0], 0, 2, 3),  # 100 % over an 80 % target: ceil(1.25 · 2)
        ([1.0, 1.0], 1, 3, 3),  # a loading pod counted at 0 % brings the ratio inside tolerance: hold
        ([0.4, 0.4], 0, 2, 1),  # half the target: ceil(0.5 · 2)
        ([], 2, 2, 2),  # no ready pod reports: hold
    ],
)
def test_utilisation(ready: list[float], unready: int, current: int, expected: int) -> None:
    assert utilisation_replicas(ready, unready, 0.8, current) == expected


def test_behaviour_stabilises_scale_down_for_300_s() -> None:
    hpa = HpaBehaviour()
    hpa.seed(0.0, 8)
    assert hpa.apply(15.0, 8, 2) == 8  # the seeded 8 is in the window
    assert hpa.apply(301.0, 8, 2) == 2  # it has left the window


def test_behaviour_limits_scale_up_to_double_or_plus_four() -> None:
    hpa = HpaBehaviour()
    assert hpa.apply(0.0, 1, 50) == 5  # max(2·1, 1+4)
    assert hpa.apply(15.0, 10, 50) == 20  # max(2·10, 10+4)


def test_behaviour_clamps_to_min_and_max() -> None:
    assert HpaBehaviour(min_replicas=2).apply(0.0, 2, 0) == 2
    assert HpaBehaviour(max_replicas=3).apply(0.0, 2, 4) == 3
