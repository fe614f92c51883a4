"""The `rollout` fault: waves of wave_size replicas drained and replaced by cold-starting new ones."""

from __future__ import annotations

import pytest

from simulator import Fleet, FleetConfig, load_trace, parse_fault

COLD_S = 60.0


def _fleet(replicas: int = 4) -> Fleet:
    trace = load_trace("synthetic:duration_s=1200,rate=6,amplitude=0,bursts=0,prompt_mean=500,output_mean=100", seed=3)
    return Fleet(FleetConfig(replicas=replicas, cold_start_s=COLD_S, routing="least_loaded", seed=3), trace)


def test_waves_replace_every_replica_one_wave_at_a_time():
    fleet = _fleet()
    fleet.advance_to(30.0)
    fleet.inject(parse_fault({"type": "rollout", "wave_size": 1, "model_name": "new-model", "speed": 2.0}))
    most_loading = 0
    t = 30.0
    while t < 30.0 + 6 * COLD_S:
        t += 5.0
        fleet.advance_to(t)
        snap = fleet.snapshot()
        most_loading = max(most_loading, sum(r.state == "loading" for r in snap.replicas))
        # never fewer than 3 replicas serving: one wave of 1 out of 4 at a time
        assert sum(r.state == "ready" for r in snap.replicas) >= 3
    snap = fleet.snapshot()
    assert most_loading == 1
    assert {r.model_name for r in snap.replicas} == {"new-model"}
    assert len(snap.replicas) == 4
    # after the rollout, new replicas (a scale-out) run the new version too
    fleet.set_replicas(5)
    assert {r.model_name for r in fleet.snapshot().replicas} == {"new-model"}


def test_a_wide_wave_takes_out_that_many_at_once():
    fleet = _fleet()
    fleet.inject(parse_fault({"type": "rollout", "wave_size": 2}))
    fleet.advance_to(10.0)
    states = [r.state for r in fleet.snapshot().replicas]
    assert states.count("loading") == 2


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ({"type": "rollout", "wave_size": 0}, "wave_size"),
        ({"type": "rollout", "speed": 0}, "speed"),
        ({"type": "rollout", "speed": "fast"}, "speed"),
        ({"type": "rollout", "waves": 2}, "waves"),
        ({"type": "rollout", "controller": "argo"}, "controller"),
        ({"type": "rollout", "controller": 1}, "controller"),
    ],
)
def test_bad_rollouts_are_refused_by_field(body, match):
    with pytest.raises(ValueError, match=match):
        parse_fault(body)


def test_one_rollout_at_a_time():
    fleet = _fleet()
    fleet.inject(parse_fault({"type": "rollout"}))
    with pytest.raises(ValueError, match="already in progress"):
        fleet.inject(parse_fault({"type": "rollout"}))


def test_the_fluid_level_says_it_cannot_roll_out():
    trace = load_trace("synthetic:duration_s=600,rate=6", seed=3)
    fleet = Fleet(FleetConfig(replicas=2, fidelity="fluid"), trace)
    with pytest.raises(ValueError, match="request level"):
        fleet.inject(parse_fault({"type": "rollout"}))


def test_replicas_added_during_a_rollout_run_the_new_version_and_are_not_rolled():
    # A surge asked for mid-rollout (kvpilot's) starts on the new version, as a Deployment scaled mid-rollout adds
    # to its new ReplicaSet; the rollout still replaces exactly the old replicas, then ends.
    fleet = _fleet()
    fleet.advance_to(30.0)
    fleet.inject(parse_fault({"type": "rollout", "wave_size": 1, "model_name": "new-model"}))
    fleet.set_replicas(6)
    added = [r for r in fleet.snapshot().replicas if r.state == "loading"]
    assert {r.model_name for r in added} == {"new-model"}
    t = 30.0
    while t < 30.0 + 6 * COLD_S:
        t += 5.0
        fleet.advance_to(t)
    snap = fleet.snapshot()
    assert {r.model_name for r in snap.replicas} == {"new-model"}
    assert len(snap.replicas) == 6
