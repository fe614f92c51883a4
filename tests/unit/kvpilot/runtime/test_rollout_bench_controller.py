"""The simulator's rollout under `controller: deployment` (its default, and bench/rollout.py's) follows the
Deployment controller's fenceposts (old pods go only while more than spec.replicas - maxUnavailable are available),
so a count raised before the rollout resumes holds the fleet's availability, where `controller: waves` (the model
before 2026-12-04) drains a whole wave regardless."""

from __future__ import annotations

import pytest

from simulator import Fleet, FleetConfig, load_trace, parse_fault
from tests.helpers.bench import load_bench
from tests.helpers.rollout_driver import StageDriver

TRACE = "synthetic:duration_s=700,rate=2,amplitude=0,bursts=0,prompt_mean=300,output_mean=60"


def _ready_during_rollout(controller: str, *, surge_to: int | None, wave: int = 2) -> list[int]:
    """Ready replicas at each 5 s tick from the rollout's start (300 s) to its end, 4 replicas asked for, raised
    to ``surge_to`` at 210 s (the template change at 180 s seen a 30 s scrape late: the surge is still loading when
    the rollout resumes) when given."""
    config = FleetConfig(replicas=4, cold_start_s=120.0, routing="least_loaded", seed=3)
    trace = load_trace(TRACE, seed=3)
    fleet = Fleet(config, trace)
    ready: list[int] = []
    t = 0.0
    while t < 690.0:
        t += 5.0
        if surge_to is not None and t == 210.0:
            fleet.set_replicas(surge_to)
        if t == 300.0:
            fleet.inject(
                parse_fault({"type": "rollout", "wave_size": wave, "model_name": "next", "controller": controller})
            )
        fleet.advance_to(t)
        if t >= 300.0:
            ready.append(sum(1 for r in fleet.snapshot().replicas if r.state == "ready"))
    return ready


@pytest.mark.parametrize(
    ("controller", "surge_to", "fewest_ready"),
    [
        # no surge: the controller may take maxUnavailable (2) of the 4 out at once, as the simulator's waves do
        ("waves", None, 2),
        ("deployment", None, 2),
        # spec.replicas raised to 6 before the resume: the controller keeps 6 - 2 = 4 available (it removes the two
        # surge pods still loading, on the old template, first); the fixed waves drain two ready replicas while the
        # surge still loads (bench/rollout.py's kvpilot-ksm at the worst phase: 90.47 % on Azure code)
        ("deployment", 6, 4),
        ("waves", 6, 2),
    ],
)
def test_a_count_raised_before_the_rollout_holds_availability_only_under_the_deployment_controller(
    controller: str, surge_to: int | None, fewest_ready: int
) -> None:
    assert min(_ready_during_rollout(controller, surge_to=surge_to)) == fewest_ready


def test_the_deployment_controller_finishes_the_rollout_on_the_new_version() -> None:
    """Every old pod replaced, one wave of 2 at a time (3 cold starts for 4 replicas and 2 surge pods' slots)."""
    config = FleetConfig(replicas=4, cold_start_s=120.0, routing="least_loaded", seed=3)
    fleet = Fleet(config, load_trace(TRACE, seed=3))
    fleet.inject(parse_fault({"type": "rollout", "wave_size": 2, "model_name": "next"}))  # the default controller
    fleet.advance_to(250.0)
    assert [r.model_name for r in fleet.snapshot().replicas] == ["next"] * 4
    fleet.set_replicas(5)  # the rollout is over: a replica added now is simply the new version
    fleet.advance_to(260.0)
    assert [r.model_name for r in fleet.snapshot().replicas] == ["next"] * 5


@pytest.mark.parametrize(("controller", "fewest_ready"), [("deployment", 4), ("waves", 2)])
def test_kvpilot_through_kube_state_metrics_holds_the_fleet_only_where_the_controller_honours_the_count(
    controller: str, fewest_ready: int
) -> None:
    """The rollout stage on a planner that holds 4 (``StageDriver``) reading the bench's kube-state-metrics at a
    30 s scrape's worst phase (the template change at 180 s seen at 210 s) surges 4 -> 6 before the resume at
    300 s; waves of 2. Under the Deployment controller no tick of the rollout has fewer than the 4 replicas demand
    needs ready; under the fixed waves the first wave leaves 2 while the surge still loads (300-325 s)."""
    bench = load_bench("rollout")
    config = FleetConfig(replicas=4, cold_start_s=120.0, routing="least_loaded", seed=3)
    trace = load_trace(TRACE, seed=3)
    fleet = Fleet(config, trace)
    kvpilot = StageDriver(
        4, scale_read=bench.ScaleReader(wave=2, ksm=bench._KsmPrometheus(30.0, bench.worst_phase(30.0)))
    )
    ready: list[int] = []
    t = 0.0
    while t < 690.0:
        t += 5.0
        if t == 300.0:
            fleet.inject(
                parse_fault({"type": "rollout", "wave_size": 2, "model_name": "next", "controller": controller})
            )
        fleet.advance_to(t)
        snap = fleet.snapshot()
        kvpilot.tick(fleet, snap, t)
        if t >= 300.0:
            ready.append(sum(1 for r in snap.replicas if r.state == "ready"))
    assert kvpilot.published[1] == (210.0, 6)
    assert min(ready) == fewest_ready
