"""What a policy can see in a backtest: one `Observation` per tick built from the simulator's snapshot, and a
bounded `History` with the windowed helpers (rates, averages, max_over_time) the peers' queries use."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from collector.rates import counter_step


@dataclass(frozen=True, slots=True)
class ReplicaObs:
    state: str  # "loading" | "ready" | "draining" (a stuck replica reads "ready", as Kubernetes shows it)
    requests_waiting: float
    requests_running: float
    kv_usage: float  # 0..1
    gpu_utilisation: float | None  # 0..1 (DCGM_FI_DEV_GPU_UTIL / 100)
    kv_capacity_tokens: float = 0.0  # KV cache size in tokens (vllm:cache_config_info blocks × block size)


@dataclass(frozen=True, slots=True)
class Observation:
    t: float
    replicas: tuple[ReplicaObs, ...]
    arrivals_total: float
    finished_total: float
    prompt_tokens_total: float
    generation_tokens_total: float

    @property
    def current(self) -> int:
        """Replicas that count toward the deployment's size (draining ones are on their way out)."""
        return sum(1 for r in self.replicas if r.state != "draining")

    @property
    def ready(self) -> tuple[ReplicaObs, ...]:
        return tuple(r for r in self.replicas if r.state == "ready")

    @property
    def waiting(self) -> float:
        return sum(r.requests_waiting for r in self.replicas if r.state != "loading")

    @property
    def running(self) -> float:
        return sum(r.requests_running for r in self.replicas if r.state != "loading")


class FleetCounters:
    """Fleet-wide counters that survive scale-down: the sum of per-replica increases (a replica that is gone
    keeps what it served), each step reset-aware as the collector's (`collector.rates.counter_step`)."""

    _NAMES = ("requests_finished_total", "prompt_tokens_total", "generation_tokens_total")

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}
        self.totals = dict.fromkeys(self._NAMES, 0.0)

    def update(self, replicas: Any) -> dict[str, float]:
        for r in replicas:
            for name in self._NAMES:
                value = float(getattr(r, name, 0.0) or 0.0)
                before = self._last.get((r.name, name))
                # a replica seen for the first time counts from 0: what it served before this tick is the fleet's too
                self.totals[name] += value if before is None else counter_step(before, value)
                self._last[(r.name, name)] = value
        return dict(self.totals)


def from_snapshot(snap: Any, counters: FleetCounters | None = None) -> Observation:
    """Observation from a simulator `FleetSnapshot` (duck-typed: the simulator shares no types with us)."""
    # GPUs join their replica by pod (dcgm-exporter's pod label), as kvpilot's collector joins them; a GPU that fell
    # off the bus (XID 79) is gone from dcgm-exporter's page, so its pod reports no utilisation.
    gpu_by_pod: dict[str, list[float]] = {}
    for g in getattr(snap, "gpus", ()):
        util = getattr(g, "utilisation", None)
        pod = getattr(g, "pod", "")
        if pod and util is not None and math.isfinite(util) and not getattr(g, "vanished", False):
            gpu_by_pod.setdefault(pod, []).append(util / 100.0 if util > 1.0 else util)
    replicas = []
    for r in snap.replicas:
        utils = gpu_by_pod.get(r.name, [])
        replicas.append(
            ReplicaObs(
                # A replica whose GPU is stuck (`scaler.backtest.faults`) still passes Kubernetes' readiness: the
                # simulator calls it "hung", the peers see it ready, as they would live.
                state="ready" if r.state == "hung" else r.state,
                requests_waiting=float(r.requests_waiting),
                requests_running=float(r.requests_running),
                kv_usage=float(r.kv_usage),
                gpu_utilisation=sum(utils) / len(utils) if utils else None,
                kv_capacity_tokens=float(getattr(r, "kv_capacity_tokens", 0) or 0),
            )
        )
    totals = (counters or FleetCounters()).update(snap.replicas)
    return Observation(
        t=float(snap.time),
        replicas=tuple(replicas),
        arrivals_total=float(snap.arrivals_total),
        finished_total=totals["requests_finished_total"],
        prompt_tokens_total=totals["prompt_tokens_total"],
        generation_tokens_total=totals["generation_tokens_total"],
    )


class History:
    """The last `max_s` seconds of observations, oldest first."""

    def __init__(self, max_s: float = 3600.0) -> None:
        self.max_s = max_s
        self._obs: deque[Observation] = deque()

    def add(self, obs: Observation) -> None:
        self._obs.append(obs)
        while self._obs and obs.t - self._obs[0].t > self.max_s:
            self._obs.popleft()

    def __iter__(self) -> Iterator[Observation]:
        return iter(self._obs)

    def __len__(self) -> int:
        return len(self._obs)

    @property
    def latest(self) -> Observation:
        return self._obs[-1]

    def window(self, window_s: float) -> list[Observation]:
        now = self._obs[-1].t
        return [o for o in self._obs if now - o.t <= window_s + 1e-9]

    def arrival_rate(self, window_s: float) -> float:
        """Requests/s arriving over the window (the router's counter: never reset by scaling)."""
        w = self.window(window_s)
        if len(w) < 2 or w[-1].t <= w[0].t:
            return 0.0
        return (w[-1].arrivals_total - w[0].arrivals_total) / (w[-1].t - w[0].t)

    def mean(self, window_s: float, value: Callable[[Observation], float | None]) -> float | None:
        vals = [v for v in (value(o) for o in self.window(window_s)) if v is not None]
        return sum(vals) / len(vals) if vals else None

    def max(self, window_s: float, value: Callable[[Observation], float | None]) -> float | None:
        vals = [v for v in (value(o) for o in self.window(window_s)) if v is not None]
        return max(vals) if vals else None
