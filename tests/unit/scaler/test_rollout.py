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


# -- the tracker: what the loop sees each tick, turned into surge_replicas' arguments ------------------------

from types import SimpleNamespace  # noqa: E402

from scaler.decision import Decision  # noqa: E402
from scaler.rollout import (  # noqa: E402
    DeploymentRollout,
    RolloutStatus,
    RolloutTracker,
    VersionsSeen,
    resolve_int_or_percent,
    surge_decision,
)


def _seen(old: int, new: int, ready: int, peak: int) -> VersionsSeen:
    by = {"vllm:v1": old, "vllm:v2": new} if new or old else {}
    return VersionsSeen(by, "vllm:v2" if new or ready < peak else None, ready, peak, f"{old} on v1, {new} on v2")


def test_tracker_times_the_next_wave_from_when_the_current_one_went_out() -> None:
    t = RolloutTracker()
    assert t.update("d", 0.0, cold_start_s=120.0, seen=_seen(4, 0, 4, 4)) is None  # one version: no rollout
    s = t.update("d", 10.0, cold_start_s=120.0, seen=_seen(3, 1, 4, 4))
    assert s == RolloutStatus(3, 1, False, 0.0, "versions", "3 on v1, 1 on v2")  # next wave any tick now
    s = t.update("d", 20.0, cold_start_s=120.0, seen=_seen(2, 1, 3, 4))  # one replica out: a wave loads
    assert s is not None
    assert s.wave_in_progress
    assert s.next_wave_in_s == 120.0
    assert s.old_remaining == 3
    s = t.update("d", 80.0, cold_start_s=120.0, seen=_seen(2, 1, 3, 4))
    assert s is not None
    assert s.next_wave_in_s == 60.0
    # the last wave: no old replica serves any more, its successor still loads: still covered ...
    s = t.update("d", 195.0, cold_start_s=120.0, seen=_seen(0, 3, 3, 4))
    assert s is not None
    assert s.old_remaining == 1
    assert s.wave_in_progress
    # ... also once the drained old replicas are forgotten and only the new version is left among the replicas
    s = t.update("d", 199.0, cold_start_s=120.0, seen=VersionsSeen({"vllm:v2": 3}, None, 3, 4))
    assert s is not None
    assert s.old_remaining == 1
    # ... until it serves (or a cold start has passed since old replicas were last seen)
    assert t.update("d", 260.0, cold_start_s=120.0, seen=_seen(0, 4, 4, 4)) is None


def test_tracker_learns_the_wave_size_from_the_widest_deficit() -> None:
    t = RolloutTracker()
    t.update("d", 0.0, cold_start_s=120.0, seen=_seen(6, 2, 8, 8))
    s = t.update("d", 5.0, cold_start_s=120.0, seen=_seen(4, 2, 6, 8))
    assert s is not None
    assert s.wave_size == 2
    assert s.old_remaining == 6


def _deployment(**kw: int) -> DeploymentRollout:
    base = dict(
        generation=2,
        observed_generation=2,
        replicas=8,
        updated_replicas=8,
        status_replicas=8,
        ready_replicas=8,
        max_surge=2,
        max_unavailable=0,
    )
    return DeploymentRollout(**{**base, **kw})


def test_the_deployment_status_wins_where_the_scale_source_reads_it() -> None:
    t = RolloutTracker()
    assert t.update("d", 0.0, cold_start_s=120.0, deployment=_deployment()) is None  # complete
    s = t.update("d", 5.0, cold_start_s=120.0, deployment=_deployment(observed_generation=1, updated_replicas=0))
    assert s is not None
    assert (s.source, s.old_remaining, s.wave_size, s.wave_in_progress) == ("kubernetes", 8, 2, True)
    s = t.update("d", 65.0, cold_start_s=120.0, deployment=_deployment(updated_replicas=2, status_replicas=10))
    assert s is not None
    assert s.old_remaining == 8  # maxSurge 2: 10 pods, 2 on the new template
    assert s.next_wave_in_s == 60.0
    # Scaling changes the generation too (spec.replicas): every pod on the newest template is no rollout.
    scaled = _deployment(generation=3, observed_generation=2, replicas=10, updated_replicas=8, status_replicas=8)
    assert t.update("d", 70.0, cold_start_s=120.0, deployment=scaled) is None


@pytest.mark.parametrize(
    ("value", "total", "up", "want"),
    [
        (None, 10, True, 3),  # 25 % of 10 rounded up (the Deployment default)
        (None, 10, False, 2),  # ... and down for maxUnavailable
        ("50%", 5, True, 3),
        (2, 10, False, 2),
        ("1", 10, True, 1),
    ],
)
def test_strategy_fenceposts_resolve_as_the_deployment_controller_does(value, total, up, want) -> None:
    assert resolve_int_or_percent(value, total, round_up=up) == want


def test_surge_decision_raises_desired_and_says_why() -> None:
    d = Decision("ns/d", 0.0, 4, 4, 4, 0, "predictive", "forecast 10 rps")
    raised = surge_decision(
        d, RolloutStatus(3, 1, True, 30.0, "versions", "1 on v2, 3 on v1"), cold_start_s=120.0, max_replicas=None
    )
    assert (raised.desired_replicas, raised.reason) == (6, "rollout_surge")
    assert raised.message.startswith("forecast 10 rps; rollout surge +2 (3 replicas left to replace in waves of 1")
    assert raised.forecast["rollout_surge"] == 2.0
    held = surge_decision(d, RolloutStatus(3, 1, True, 30.0, "versions"), cold_start_s=120.0, max_replicas=4)
    assert (held.desired_replicas, held.reason) == (4, "predictive")  # the ceiling: nothing to add


def test_kubernetes_deployment_objects_are_read_into_a_rollout() -> None:
    from kvpilot.runtime.scale_view import deployment_rollout

    obj = SimpleNamespace(
        metadata=SimpleNamespace(name="chat", generation=3),
        spec=SimpleNamespace(
            replicas=8,
            strategy=SimpleNamespace(
                type="RollingUpdate", rolling_update=SimpleNamespace(max_surge="25%", max_unavailable=0)
            ),
        ),
        status=SimpleNamespace(observed_generation=2, updated_replicas=None, replicas=8, ready_replicas=8),
    )
    r = deployment_rollout(obj)
    assert r.old_pods == 8  # updatedReplicas omitted (0): no pod on the newest template yet
    assert r.in_progress
    assert (r.max_surge, r.max_unavailable, r.updated_replicas) == (2, 0, 0)


def test_the_surge_loading_never_widens_the_waves() -> None:
    # Replicas asked for and not ready include the surge itself: they say a wave is loading, never how wide.
    t = RolloutTracker()
    t.update("d", 0.0, cold_start_s=120.0, seen=_seen(3, 1, 4, 4))
    for i, asked in enumerate((6, 9, 12)):
        seen = VersionsSeen({"vllm:v1": 2, "vllm:v2": 2}, "vllm:v2", 4, 4, "", replicas=asked)
        s = t.update("d", 5.0 * (i + 1), cold_start_s=120.0, seen=seen)
        assert s is not None
        assert (s.wave_size, s.wave_in_progress, s.old_remaining) == (1, True, 3)


def test_a_paused_rollout_gets_one_wave_ahead_and_its_own_loading_surge_is_no_wave() -> None:
    # kubectl rollout pause; set image: the template changed (observed), no pod on it yet. The surge asked for
    # loads (status.replicas 5, 4 ready) but no wave runs: one wave ahead, not two.
    t = RolloutTracker()
    paused = _deployment(
        replicas=5, updated_replicas=0, status_replicas=5, ready_replicas=4, max_surge=0, max_unavailable=1
    )
    s = t.update("d", 0.0, cold_start_s=120.0, deployment=paused)
    assert s is not None
    assert (s.old_remaining, s.wave_size, s.wave_in_progress, s.next_wave_in_s) == (5, 1, False, 0.0)


def test_a_deployment_the_controller_never_reported_on_has_no_rollout_status() -> None:
    from kvpilot.runtime.scale_view import deployment_rollout

    obj = SimpleNamespace(
        metadata=SimpleNamespace(name="chat", generation=1), spec=SimpleNamespace(replicas=2), status=None
    )
    with pytest.raises(ValueError, match="not reported"):
        deployment_rollout(obj)


def test_a_wave_that_drained_its_old_pod_still_counts_it_and_the_last_wave_is_covered() -> None:
    # maxUnavailable 1: the wave's old pod is gone (terminating pods are not in status.replicas) and its successor
    # loads: 1 old pod left + the one being replaced = 2 to cover, one wave each.
    t = RolloutTracker()
    mid = _deployment(
        replicas=6, updated_replicas=5, status_replicas=6, ready_replicas=5, max_surge=0, max_unavailable=1
    )
    s = t.update("d", 0.0, cold_start_s=120.0, deployment=mid)
    assert s is not None
    assert (s.old_remaining, s.wave_in_progress) == (2, True)
    # the last wave: every pod on the new template, one still loading: still covered ...
    last = _deployment(
        replicas=6, updated_replicas=6, status_replicas=6, ready_replicas=5, max_surge=0, max_unavailable=1
    )
    s = t.update("d", 60.0, cold_start_s=120.0, deployment=last)
    assert s is not None
    assert s.old_remaining == 1
    # ... but pods loading after a plain scale-up (no old pods seen within a cold start) are no rollout
    assert t.update("d", 200.0, cold_start_s=120.0, deployment=last) is None
    assert RolloutTracker().update("e", 0.0, cold_start_s=120.0, deployment=last) is None
