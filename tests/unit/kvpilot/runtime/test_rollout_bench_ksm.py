"""bench/rollout.py's PromQL mode (`kvpilot-ksm`): the Deployment's status reaches the rollout stage as
kube-state-metrics' series scraped by Prometheus, read through KubeStateMetricsScale, so it is seen up to one scrape
interval later than from the API server (`kvpilot-k8s`), and never earlier."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvpilot.runtime.scale_ksm import KubeStateMetricsScale, ksm_deployments
from scaler.rollout import DeploymentRollout
from simulator import Fleet as SimFleet
from simulator import FleetConfig, load_trace
from tests.helpers.bench import load_bench
from tests.helpers.rollout_driver import StageDriver

PENDING = DeploymentRollout(
    generation=2,
    observed_generation=2,
    replicas=4,
    updated_replicas=0,
    status_replicas=4,
    ready_replicas=4,
    max_surge=0,
    max_unavailable=1,
)
STEADY = DeploymentRollout(1, 1, 4, 4, 4, 4, 0, 1)


def _bench() -> Any:
    return load_bench("rollout")


def test_the_generated_series_read_back_as_the_status_they_were_written_from() -> None:
    bench = _bench()
    found, bad = ksm_deployments(bench.ksm_series(PENDING, at=10.0))
    assert bad == {}
    assert found[bench.KEY].rollout == PENDING
    assert found[bench.KEY].replicas == 4


@pytest.mark.parametrize(
    ("phase_s", "seen_at"),
    [
        (None, 210.0),  # the worst phase: a scrape just before the change, the next a whole interval later
        (0.0, 180.0),  # a scrape on the tick of the change
        (10.0, 190.0),
    ],
)
def test_the_status_is_read_from_the_last_scrape(phase_s: float | None, seen_at: float) -> None:
    """The template changes at 180 s; kvpilot reads kube-state-metrics every 5 s tick through
    KubeStateMetricsScale, and sees the change at the first scrape at or after it."""
    bench = _bench()
    prom = bench._KsmPrometheus(30.0, bench.worst_phase(30.0) if phase_s is None else phase_s)
    scale = KubeStateMetricsScale(prom.query)
    first = None
    t = 0.0
    while t < 260.0:
        t += 5.0
        prom.observe(PENDING if t >= 180.0 else STEADY, t)
        view = asyncio.run(scale.read([bench.KEY], t))
        if first is None and view.rollouts[bench.KEY].generation == 2:
            first = t
    assert first == seen_at


def test_the_ksm_mode_surges_one_scrape_interval_after_the_api_servers() -> None:
    """The rollout stage on a planner that holds 4 (``StageDriver``), told the bench's Deployment status, on the
    simulator up to the first drain: reading the Deployment from the API server it
    surges when the template changes (180 s), through kube-state-metrics at the worst phase 30 s later."""
    bench = _bench()
    trace = load_trace("synthetic:duration_s=320,rate=5,amplitude=0,bursts=0,prompt_mean=400,output_mean=150", seed=5)
    surged: dict[str, float] = {}
    for mode, ksm in (("k8s", None), ("ksm", bench._KsmPrometheus(30.0, bench.worst_phase(30.0)))):
        sim = SimFleet(FleetConfig(replicas=4, cold_start_s=120.0, routing="least_loaded", seed=5), trace)
        kvpilot = StageDriver(4, scale_read=bench.ScaleReader(wave=1, ksm=ksm))
        t = 0.0
        while t < 290.0:
            t += 5.0
            sim.advance_to(t)
            kvpilot.tick(sim, sim.snapshot(), t)
        surged[mode] = next(at for at, n in kvpilot.published if n > 4)
    assert surged == {"k8s": 180.0, "ksm": 210.0}
