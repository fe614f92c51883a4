"""Builders for detector tests: real FleetState fed with canonical samples, tick by tick."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from collector.samples import GpuSample, Histogram, ReplicaSample
from collector.state import FleetState

TICK_S = 5.0
BOUNDS = (0.1, 0.5, 1.0, 2.5, 5.0, float("inf"))


def replica(
    name: str = "r0", t: float = 0.0, *, deployment: str = "chat", node: str | None = None, **kw: Any
) -> ReplicaSample:
    base = ReplicaSample(
        namespace="ml",
        deployment=deployment,
        replica=name,
        node=node or f"node-{name}",
        engine="vllm",
        model="m",
        timestamp=t,
        requests_waiting=0.0,
        requests_running=4.0,
        kv_usage=0.3,
        generation_tokens=0.0,
    )
    return replace(base, **kw)


def gpu(node: str = "node-r0", t: float = 0.0, *, index: str = "0", **kw: Any) -> GpuSample:
    base = GpuSample(
        node=node, index=index, uuid=f"GPU-{node}-{index}", model_name="H100", timestamp=t, utilisation=0.7
    )
    return replace(base, **kw)


def ttft(fast: float, slow: float) -> Histogram:
    """Cumulative TTFT histogram: `fast` requests under 0.5 s, `slow` above 5 s."""
    total = fast + slow
    return Histogram(bounds=BOUNDS, counts=(0.0, fast, fast, fast, fast, total), sum=fast * 0.2 + slow * 8, count=total)


Tick = Callable[[int, float], tuple[Sequence[ReplicaSample], Sequence[GpuSample]]]


def drive(
    tick: Tick, ticks: int, *, state: FleetState | None = None, each: Callable[[FleetState, float], None] | None = None
) -> FleetState:
    """Observe `ticks` ticks of `tick(i, t)`; call `each(state, t)` after every observe."""
    state = state or FleetState()
    for i in range(ticks):
        t = i * TICK_S
        replicas, gpus = tick(i, t)
        state.observe(replicas, gpus, now=t)
        if each is not None:
            each(state, t)
    return state
