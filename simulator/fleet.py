"""`Fleet`: one interface over the two fidelity levels, as the backtest and the live server drive it."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Sequence
from typing import Any, Protocol

import numpy as np

from simulator.config import FleetConfig
from simulator.faults import Fault
from simulator.replica import FinishedRequest
from simulator.snapshot import FleetSnapshot
from simulator.trace.model import Trace


class _Engine(Protocol):
    time: float

    @property
    def replicas(self) -> Sequence[Any]: ...  # every replica held: loading, ready and draining

    def set_replicas(self, n: int) -> None: ...
    def advance_to(self, t: float) -> None: ...
    def snapshot(self, replicas: Collection[str] | None = None) -> FleetSnapshot: ...
    def inject(self, fault: Fault) -> None: ...
    def finished(self) -> list[FinishedRequest]: ...
    def ttft_samples(self) -> tuple[np.ndarray, np.ndarray]: ...
    def ttft_arrivals(self) -> np.ndarray: ...
    def fork(self, cold_start_s: float | None) -> Any: ...
    def evict(self, name: str) -> int: ...
    def in_flight(self) -> list[tuple[float, float | None]]: ...


class Fleet:
    """A simulated fleet replaying `trace`. Deterministic for (config, trace): same calls, same results.

    Times are virtual seconds since the trace start; `advance_to` only moves forward.
    """

    def __init__(self, config: FleetConfig, trace: Trace) -> None:
        self.config = config
        self.trace = trace
        if config.fidelity == "fluid":
            from simulator.fluid import FluidFleet

            self._engine: _Engine = FluidFleet(config, trace)
        else:
            from simulator.request_fleet import RequestFleet

            self._engine = RequestFleet(config, trace)

    @property
    def time(self) -> float:
        return self._engine.time

    def fork(self, *, cold_start_s: float | None = None) -> Fleet:
        """An independent copy of the fleet as it is now, for what-if replays (the backtest's frontier search):
        it shares the read-only trace, starts with no finished-request or TTFT records of its own, and may
        start replicas with another cold start (0: ready at once)."""
        twin = copy.copy(self)
        twin._engine = self._engine.fork(cold_start_s)
        if cold_start_s is not None:
            twin.config = dataclasses.replace(self.config, cold_start_s=cold_start_s)
        return twin

    def replica_count(self) -> int:
        """Replicas the fleet holds now, loading and draining included: ``len(self.snapshot().replicas)`` without
        building the snapshot (at the fluid level that renders every replica's histograms; both engines' snapshots
        list exactly the replicas they hold). A fluid snapshot also books serving periods and sets GPU gauges, which
        only snapshots read, so counting this way changes nothing else."""
        return len(self._engine.replicas)

    def set_replicas(self, n: int) -> None:
        """Desired replica count: new replicas cold-start (not ready for cold_start_s); removed ones drain."""
        self._engine.set_replicas(n)

    def advance_to(self, t: float) -> None:
        self._engine.advance_to(t)

    def snapshot(self, replicas: Collection[str] | None = None) -> FleetSnapshot:
        """The fleet now; `replicas` limits the per-replica part to those names (a scrape of one replica need
        not copy every replica's histograms). GPUs are always all there."""
        return self._engine.snapshot(replicas)

    def inject(self, fault: Fault) -> None:
        """Apply a fault now (see simulator.faults). KeyError for an unknown node/GPU/replica."""
        self._engine.inject(fault)

    def evict(self, name: str) -> int:
        """Delete a replica's pod (a drain's eviction): it stops receiving requests at once, the requests it held
        are retried through the gateway, and a replacement cold-starts on a healthy GPU. Returns the requests
        retried. KeyError for an unknown replica."""
        return self._engine.evict(name)

    def in_flight(self) -> list[tuple[float, float | None]]:
        """(arrival_s, TTFT or None before the first token) of each request that arrived and has not finished
        (request level; the fluid level holds no individual requests and returns none)."""
        return self._engine.in_flight()

    def finished(self) -> Sequence[FinishedRequest]:
        """Requests finished so far, in completion order (request level; the fluid level returns none)."""
        return self._engine.finished()

    def ttft_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT values, weights) recorded so far: one per finished request at the request level, quantile
        points weighted by arrivals at the fluid level."""
        return self._engine.ttft_samples()

    def ttft_arrivals(self) -> np.ndarray:
        """When the requests behind each of `ttft_samples` arrived, in the same order (fluid: their step's start)."""
        return self._engine.ttft_arrivals()

    def ttft_quantiles(self, qs: Sequence[float] = (0.5, 0.9, 0.99)) -> dict[float, float]:
        """TTFT quantiles over requests that got their first token so far (fluid: estimated from queueing)."""
        values, weights = self._engine.ttft_samples()
        return {q: _weighted_quantile(values, weights, q) for q in qs}

    def slo_attainment(self, slo_s: float) -> float:
        """Share of requests (so far) whose TTFT was within slo_s; 1.0 when there were none."""
        values, weights = self._engine.ttft_samples()
        total = float(weights.sum())
        return 1.0 if total <= 0 else float(weights[values <= slo_s].sum()) / total


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if len(values) == 0 or weights.sum() <= 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    idx = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(v[min(idx, len(v) - 1)])
