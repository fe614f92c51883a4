"""Whatever the engines and exporters send (NaN, inf, negative, missing, counters that jump back), the detectors
neither raise nor report non-finite numbers: metrics come from outside."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.samples import GpuSample, Histogram, ReplicaSample
from collector.state import FleetState
from detectors.registry import run_all

values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1), st.integers(-5, 10**9))


@st.composite
def tick(draw: st.DrawFn, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
    reps = []
    for name in draw(st.lists(st.sampled_from(["r0", "r1", "r2"]), unique=True, max_size=3)):
        count = draw(st.floats(0, 1e6))
        hist = Histogram(bounds=(0.5, 1.0, math.inf), counts=(count / 2, count / 2, count), sum=count, count=count)
        reps.append(
            ReplicaSample(
                namespace="ml",
                deployment="chat",
                replica=name,
                node=f"n-{name}",
                engine="vllm",
                model=None,
                timestamp=t,
                requests_waiting=draw(values),
                requests_running=draw(values),
                kv_usage=draw(values),
                prefix_queries=draw(values),
                prefix_hits=draw(values),
                preemptions=draw(values),
                generation_tokens=draw(values),
                requests_finished=draw(values),
                ttft=draw(st.one_of(st.none(), st.just(hist))),
            )
        )
    gpus = [
        GpuSample(
            node=f"n-{name}",
            index="0",
            uuid=None,
            model_name=None,
            timestamp=t,
            pod=name,
            utilisation=draw(values),
            last_xid=draw(st.one_of(st.none(), st.integers(-1, 200))),
            xid_count=draw(values),
            recovery_action=draw(st.one_of(st.none(), st.integers(-1, 9))),
        )
        for name in draw(st.lists(st.sampled_from(["r0", "r1", "r2"]), unique=True, max_size=3))
    ]
    return reps, gpus


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_detectors_survive_any_input(data):
    state = FleetState(stale_after_s=15)
    for i in range(data.draw(st.integers(1, 8))):
        t = 5.0 * i
        reps, gpus = data.draw(tick(t))
        state.observe(reps, gpus, now=t)
        for f in run_all(state, now=t):
            for key, value in f.evidence.items():
                assert not (isinstance(value, float) and not math.isfinite(value)), (f.kind, key, value)
