"""surge_replicas: desired plus the replicas being replaced, one cold start ahead of each wave."""

from __future__ import annotations

import pytest

from scaler.rollout import surge_replicas

BASE = {"desired": 8, "old_remaining": 8, "wave_size": 2, "wave_in_progress": False, "next_wave_in_s": None}

CASES = [
    # no rollout: nothing left to replace, the answer is desired
    ({"old_remaining": 0, "wave_in_progress": True, "next_wave_in_s": 0.0}, 8),
    # a rollout planned, its first wave more than one cold start away: no surge yet
    ({"next_wave_in_s": 300.0}, 8),
    # the next wave starts within one cold start: its surge is asked for now, so its successors are warm in time
    ({"next_wave_in_s": 100.0}, 10),
    # a wave loading now: its old replicas still serve, the surge covers them
    ({"wave_in_progress": True}, 10),
    # a wave loading now and the next one within a cold start: two waves of surge
    ({"wave_in_progress": True, "next_wave_in_s": 60.0}, 12),
    # the last wave: never more surge than replicas left to replace
    ({"wave_in_progress": True, "next_wave_in_s": 60.0, "old_remaining": 3}, 11),
    # the ceiling caps the surge ...
    ({"wave_in_progress": True, "max_replicas": 9}, 9),
    # ... but never cuts what demand needs
    ({"wave_in_progress": True, "max_replicas": 6}, 8),
    # a wave starting exactly one cold start ahead counts
    ({"next_wave_in_s": 120.0}, 10),
]


@pytest.mark.parametrize(("changes", "expected"), CASES)
def test_surge(changes, expected):
    assert surge_replicas(**{**BASE, **changes}, cold_start_s=120.0) == expected


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"desired": -1}, "desired"),
        ({"wave_size": 1.5}, "wave_size"),
        ({"old_remaining": True}, "old_remaining"),
        ({"next_wave_in_s": float("nan")}, "next_wave_in_s"),
        ({"next_wave_in_s": -5.0}, "next_wave_in_s"),
        ({"max_replicas": -1}, "max_replicas"),
    ],
)
def test_bad_input_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        surge_replicas(**{**BASE, **changes}, cold_start_s=120.0)


def test_bad_cold_start():
    with pytest.raises(ValueError, match="cold_start_s"):
        surge_replicas(**BASE, cold_start_s=float("inf"))
