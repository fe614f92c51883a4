"""The fluid level: per time step, arrival rate → queue, requests in flight, KV occupancy, throughput, TTFT.

Replicas are identical and share load evenly. Each step of dt seconds (default 10 s):

1. arrivals λ·dt join the backlog (at the gateway while no replica is ready);
2. the ready replicas serve min(backlog, μ·replicas·dt), μ being a replica's steady-state capacity from the
   step-time model (`_ReplicaModel`: decode steps that batch n sequences, prefill riding on them, at most
   min(max_num_seqs, KV tokens / (P + O/2)) requests in flight);
3. requests in flight follow from Little's law at the served rate; KV usage = in flight × (P + O/2) / pool;
4. the TTFT of the step's arrivals is their own prefill, up to one decode step, the wait behind the backlog,
   and an M/D/1-like random wait that grows as utilisation nears 1 — sampled at 16 quantile points.

Steps are longer than a request's life (seconds), so transients inside a step are not modelled: the fluid level
sees no queue below capacity where the request level sees short Poisson bursts. BENCHMARKS.md ("Simulator")
reports the differences against the request level on the hour-long traces.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from bisect import bisect_left
from collections.abc import Collection

import numpy as np

from simulator.config import FleetConfig
from simulator.faults import Fault
from simulator.gpus import HANGING_XIDS, VANISHING_XIDS, Gpu, Nodes
from simulator.histogram import ITL_GRID, LATENCY_GRID, TTFT_BUCKETS, Histogram, token_buckets
from simulator.profile import ReplicaProfile
from simulator.replica import FinishedRequest
from simulator.snapshot import FleetSnapshot, ReplicaSnapshot
from simulator.trace.model import PREFIX_BLOCK_TOKENS, Trace

# Quantile points at which each step's TTFT distribution is sampled (midpoints of 16 equal-mass slices).
_U = (np.arange(16) + 0.5) / 16
_EXP_U = -np.log1p(-_U)
# Without prefix-aware routing a replica sees 1/N of each prefix's traffic and hit rates fall; for a configured
# hit rate (or a rates-only trace) the fall is this factor, else it is measured on the trace (see docs).
_SPREAD_HIT_FACTOR = 0.7
# Hit rate assumed for traces held only as rates (ServeGen), within the range of the synthesized-prefix traces.
_DEFAULT_HIT_RATE = 0.3


class _FluidReplica:
    def __init__(self, name: str, now: float, ready_at: float) -> None:
        self.name = name
        self.started_s = now
        self.ready_at = ready_at
        self.hung = False
        # Counters as the engine process keeps them: what it served while it served (FluidFleet._credit).
        self.credited: np.ndarray | None = None  # over past serving periods
        self.serving_since: np.ndarray | None = None  # the per-replica running total when this period began


class FluidFleet:
    def __init__(self, config: FleetConfig, trace: Trace) -> None:
        self.cfg = config
        self.p = config.profile
        self.dt = config.fluid_step_s
        rs = trace.rate_series(self.dt)
        self._rate = rs.req_per_s
        self._prompt = rs.mean_prompt_tokens
        self._output = rs.mean_output_tokens
        self.time = 0.0
        self.routing = config.routing
        self._trace = trace
        self._spread_hits: dict[int, float] = {}
        self.queue = 0.0
        self.running = 0.0
        self.arrivals = 0.0
        self._extra: list[tuple[float, float, float, float]] = []  # (start, end, req/s, prompt tokens)
        self.nodes = Nodes(self.p.gpu, config.gpus_per_node)
        self.replicas: list[_FluidReplica] = []
        self._gpus: dict[str, list[Gpu]] = {}
        self._serial = 0
        self._ttft_v: list[np.ndarray] = []
        self._ttft_w: list[np.ndarray] = []
        self._ttft_t: list[float] = []  # when each recorded step's requests arrived (its start)
        self._ttft_counts = [0.0] * (len(TTFT_BUCKETS) + 1)
        self._ttft_sum = 0.0
        self._tot = {k: 0.0 for k in ("prompt", "gen", "queries", "hits", "finished", "preempt", "busy")}
        self._kv_usage = 0.0
        self._util = 0.0
        self._itl = Histogram(ITL_GRID)
        # Running total of what one serving replica served (each step's fleet increments over the replicas
        # serving it): a replica's counters are this total's growth while it served, so they never fall when
        # the fleet grows or shrinks (a share of the fleet's totals would, and read as a counter reset).
        self._per_replica = np.zeros(len(self._fleet_totals()))
        self._roster_due = 0.0  # when a replica's serving state may next change (_credit); 0: check now
        for _ in range(config.replicas):
            self._add(0.0 if config.start_ready else config.cold_start_s)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def _add(self, ready_at: float) -> None:
        name = f"{self.cfg.deployment}-{self._serial:04d}"
        self._serial += 1
        self.replicas.append(_FluidReplica(name, self.time, ready_at))
        self._roster_due = 0.0
        self._gpus[name] = self.nodes.place(name, self.p.gpus_per_replica)

    def set_replicas(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"replica count must be >= 0, got {n}")
        for _ in range(n - len(self.replicas)):
            self._add(self.time + self.cfg.cold_start_s)
        if n < len(self.replicas):
            order = sorted(self.replicas, key=lambda r: (r.ready_at <= self.time, -r.started_s))
            self._roster_due = 0.0
            for r in order[: len(self.replicas) - n]:
                self.replicas.remove(r)
                self.nodes.release(self._gpus.pop(r.name))

    def evict(self, name: str) -> int:
        """The pod is deleted and replaced (cold start, healthy GPU); the fluid queue is the fleet's, so no
        request is held by the replica itself."""
        r = next((x for x in self.replicas if x.name == name), None)
        if r is None:
            raise KeyError(f"no replica {name!r}")
        self.replicas.remove(r)
        self.nodes.release(self._gpus.pop(r.name))
        self._add(self.time + self.cfg.cold_start_s)
        return 0

    def in_flight(self) -> list[tuple[float, float | None]]:
        return []

    def fork(self, cold_start_s: float | None = None) -> FluidFleet:
        """A deep copy sharing the read-only trace and rate series, with no TTFT records of its own."""
        shared = (self._trace, self._rate, self._prompt, self._output)
        memo: dict[int, object] = {id(x): x for x in shared}
        memo[id(self._ttft_v)] = []
        memo[id(self._ttft_w)] = []
        memo[id(self._ttft_t)] = []
        twin = copy.deepcopy(self, memo)
        if cold_start_s is not None:
            twin.cfg = dataclasses.replace(self.cfg, cold_start_s=cold_start_s)
        return twin

    def _serving(self) -> int:
        return sum(1 for r in self.replicas if r.ready_at <= self.time and not r.hung)

    def _fleet_totals(self) -> np.ndarray:
        """The fleet's counters as one vector: tokens, prefix queries and hits, finished, TTFT and ITL buckets."""
        t = self._tot
        head = (t["prompt"], t["gen"], t["queries"], t["hits"], t["finished"])
        return np.array(
            [*head, *self._ttft_counts, self._ttft_sum, *self._itl.counts, self._itl.total], dtype=np.float64
        )

    def _credit(self) -> None:
        """Open or close each replica's serving period at the current time (ready and not hung)."""
        if self.time < self._roster_due:
            return
        self._roster_due = min((r.ready_at for r in self.replicas if r.ready_at > self.time), default=math.inf)
        for r in self.replicas:
            serving = r.ready_at <= self.time and not r.hung
            if serving and r.serving_since is None:
                r.serving_since = self._per_replica.copy()
            elif not serving and r.serving_since is not None:
                past = r.credited if r.credited is not None else 0.0
                r.credited = past + (self._per_replica - r.serving_since)
                r.serving_since = None

    def _replica_totals(self, r: _FluidReplica) -> np.ndarray:
        out = np.zeros_like(self._per_replica) if r.credited is None else r.credited.copy()
        if r.serving_since is not None:
            out += self._per_replica - r.serving_since
        return out

    # -- dynamics ----------------------------------------------------------------------------------------------
    def advance_to(self, t: float) -> None:
        if t < self.time:
            raise ValueError(f"cannot advance backwards from {self.time} to {t}")
        while self.time < t - 1e-9:
            # Whole steps on the grid, a partial one to land exactly on t.
            nxt = min((math.floor(self.time / self.dt + 1e-9) + 1) * self.dt, t)
            self._step(nxt - self.time)

    def _step(self, dt: float) -> None:
        self._credit()
        before = self._fleet_totals()
        p = self.p
        i = int(self.time // self.dt)
        past_end = i >= len(self._rate) and not self.cfg.loop
        i = i % len(self._rate) if self.cfg.loop else min(i, len(self._rate) - 1)
        lam, prompt, output = float(self._rate[i]), float(self._prompt[i]), max(float(self._output[i]), 1.0)
        if past_end:
            lam = 0.0  # the trace is over: no more arrivals, the backlog drains
        for start, end, rate, extra_prompt in self._extra:
            if start <= self.time < end:
                prompt = (lam * prompt + rate * extra_prompt) / max(lam + rate, 1e-12)
                lam += rate
        arrivals = lam * dt
        self.arrivals += arrivals
        n_rep = self._serving()
        hit = self._hit_rate(n_rep)
        uncached = prompt * (1.0 - (hit if p.enable_prefix_caching else 0.0))
        m = _ReplicaModel(p, prompt, output, uncached)
        backlog_before = self.queue
        offered = self.queue + arrivals
        served = min(offered, m.capacity * n_rep * dt)
        self.queue = offered - served
        a = served / (n_rep * dt) if n_rep else 0.0
        n = m.in_flight(a)
        self.running = n * n_rep
        self._util = min(1.0, n)
        self._kv_usage = min(1.0, n * m.context / p.kv_capacity_tokens)
        t = self._tot
        t["prompt"] += served * prompt
        t["queries"] += served * prompt
        t["hits"] += served * (prompt - uncached)
        t["gen"] += served * output
        t["finished"] += served
        t["busy"] += self._util * dt * n_rep
        if n > 0:
            self._itl.observe(m.step_time(n), max(1, round(served * output)))
        self._record_ttft(arrivals, backlog_before, m, a, n, n_rep)
        if n_rep:
            self._per_replica += (self._fleet_totals() - before) / n_rep
        self.time += dt

    def _record_ttft(
        self, arrivals: float, backlog_before: float, m: _ReplicaModel, a: float, n: float, n_rep: int
    ) -> None:
        """TTFT of this step's arrivals at quantile points: own prefill, a partial step, the deterministic
        wait behind the backlog (growing linearly over the step), and an M/D/1-like random wait."""
        if arrivals <= 0:
            return
        step = m.step_time(n)
        share = 1.0 - a * m.prefill_s  # of wall time left to decode steps
        own = m.prefill_s / max(share, 0.05) + step * _U
        if n_rep == 0:
            pending = sum(1 for r in self.replicas if r.ready_at > self.time)
            drain = max(pending, 1) * m.capacity
            backlog = self._time_to_ready() + (backlog_before + (self.queue - backlog_before) * _U) / drain
            random = np.zeros_like(_U)
        else:
            backlog = (backlog_before + (self.queue - backlog_before) * _U) / (m.capacity * n_rep)
            rho = min(a / m.capacity, 0.99) if m.capacity > 0 else 0.99
            random = rho / (2 * (1 - rho)) * (m.prefill_s + step) * _EXP_U
        values = own + backlog + random
        weights = np.full(len(_U), arrivals / len(_U))
        self._ttft_v.append(values)
        self._ttft_w.append(weights)
        self._ttft_t.append(self.time)
        for v, w in zip(values.tolist(), weights.tolist(), strict=True):
            self._ttft_counts[_bucket(v)] += w
            self._ttft_sum += v * w

    def _hit_rate(self, replicas: int) -> float:
        """Prefix-cache hit share: configured, else measured on the trace's prefix blocks — as one cache with
        prefix-aware routing, dealt round-robin over the serving replicas without it."""
        configured = self.cfg.fluid_prefix_hit_rate
        spread = self.routing != "prefix_affinity"
        if configured is not None:
            return configured * (_SPREAD_HIT_FACTOR if spread else 1.0)
        key = max(replicas, 1) if spread else 1
        if key not in self._spread_hits:
            # Each replica's cache holds what its KV pool holds (prefix-aware routing: the fleet's pools together).
            entries = max(self.p.kv_capacity_tokens // PREFIX_BLOCK_TOKENS, 1) * (1 if spread else max(replicas, 1))
            share = self._trace.prefix_reuse_share(key, entries)
            self._spread_hits[key] = (
                share if share is not None else _DEFAULT_HIT_RATE * (_SPREAD_HIT_FACTOR if spread else 1.0)
            )
        return self._spread_hits[key]

    def _time_to_ready(self) -> float:
        pending = [r.ready_at - self.time for r in self.replicas if r.ready_at > self.time]
        return min(pending) if pending else 3600.0

    # -- outputs -----------------------------------------------------------------------------------------------
    def ttft_samples(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._ttft_v:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(self._ttft_v), np.concatenate(self._ttft_w)

    def ttft_arrivals(self) -> np.ndarray:
        """When the requests behind each of `ttft_samples` arrived (their step's start), in the same order."""
        return np.repeat(np.asarray(self._ttft_t, dtype=np.float64), len(_U))

    def finished(self) -> list[FinishedRequest]:
        return []

    def snapshot(self, replicas: Collection[str] | None = None) -> FleetSnapshot:
        self._credit()
        n = max(len(self.replicas), 1)
        n_serving = max(self._serving(), 1)
        reps = []
        for r in self.replicas:
            if replicas is not None and r.name not in replicas:
                continue
            ready = r.ready_at <= self.time
            share = 1.0 / n_serving if ready and not r.hung else 0.0
            reps.append(self._replica_snapshot(r, ready, share, n))
        for r in self.replicas:
            for g in self._gpus[r.name]:
                ready = r.ready_at <= self.time
                g.utilisation = 1.0 if g.hung else (self._util if ready else 0.0)
                g.memory_used = int(self.p.gpu.memory_bytes * self.p.gpu_memory_utilization) if ready else 0
        gpus = [g.snapshot() for g in self.nodes.all()]
        waiting_gateway = round(self.queue) if self._serving() == 0 else 0
        return FleetSnapshot(self.time, round(self.arrivals), waiting_gateway, self.routing, reps, gpus)

    def _replica_snapshot(self, r: _FluidReplica, ready: bool, share: float, n: int) -> ReplicaSnapshot:
        p = self.p
        v = self._replica_totals(r).tolist()
        nt = len(self._ttft_counts)
        ttft, itl = v[5 : 5 + nt + 1], v[6 + nt :]
        hist = Histogram(TTFT_BUCKETS, [round(c) for c in ttft[:-1]], ttft[-1])
        empty = Histogram(LATENCY_GRID)
        return ReplicaSnapshot(
            name=r.name,
            node=self._gpus[r.name][0].node,
            state="loading" if not ready else ("hung" if r.hung else "ready"),
            model_name=p.model_name,
            requests_waiting=round(self.queue * share),
            requests_running=round(self.running * share),
            kv_usage=self._kv_usage if share > 0 else 0.0,
            kv_capacity_tokens=p.kv_capacity_tokens,
            num_gpu_blocks=p.num_gpu_blocks,
            block_size=p.block_size,
            prompt_tokens_total=round(v[0]),
            generation_tokens_total=round(v[1]),
            prefix_queries_total=round(v[2]),
            prefix_hits_total=round(v[3]),
            preemptions_total=0,
            requests_finished_total=round(v[4]),
            requests_aborted_total=0,
            started_s=r.started_s,
            ttft=hist,
            itl=Histogram(ITL_GRID, [round(c) for c in itl[:-1]], itl[-1]),
            e2e=empty,
            queue_time=empty,
            prefill_time=empty,
            decode_time=empty,
            inference_time=empty,
            prompt_len=Histogram(token_buckets(p.max_model_len)),
            output_len=Histogram(token_buckets(p.max_model_len)),
            gpu_uuids=tuple(g.uuid for g in self._gpus[r.name]),
        )

    # -- faults --------------------------------------------------------------------------------------------------
    def inject(self, fault: Fault) -> None:
        self._roster_due = 0.0  # a crash or a hung GPU changes who serves
        if fault.type == "routing":
            self.routing = fault.routing
        elif fault.type == "crash":
            r = next((x for x in self.replicas if x.name == fault.replica), None)
            if r is None:
                raise KeyError(f"no replica {fault.replica!r}")
            r.started_s, r.ready_at, r.hung = self.time, self.time + self.cfg.cold_start_s, False
            r.credited = r.serving_since = None  # a new engine process counts from zero
        elif fault.type == "rollout":
            raise ValueError("fault 'rollout' needs the request level (fidelity 'request')")
        elif fault.type == "kv_pressure":
            rate = fault.count / fault.duration_s
            self._extra.append((self.time, self.time + fault.duration_s, rate, float(fault.prompt_tokens)))
        else:
            g = self.nodes.find(fault.node, fault.gpu)
            owner = next((x for x in self.replicas if x.name == g.pod), None)
            if fault.type == "recover":
                g.hung = g.vanished = False
                g.last_xid = 0
            elif fault.type == "vanish_gpu":
                g.vanished = True
            else:
                g.last_xid = fault.xid or g.last_xid
                g.vanished = g.vanished or fault.xid in VANISHING_XIDS
                g.hung = g.hung or fault.type == "hung_gpu" or fault.xid in HANGING_XIDS
            if owner is not None:
                owner.hung = any(x.hung for x in self._gpus[owner.name])


class _ReplicaModel:
    """Steady-state service of one replica for requests of mean prompt P, output O (uncached prompt U).

    A decode step of n sequences costs T(n) = base + n·b, with b = decode_s_per_seq + (P + O/2)·kv_read;
    prefill of U tokens rides on those steps and costs U·prefill_s_per_token = p1. With admissions at rate a,
    decode gets the share f = 1 − a·p1 of the wall time, a request stays O·T(n)/f + p1, and Little's law gives
    n = a·(O·base + p1) / (f − a·O·b). Capacity is the a at which n reaches n_max = min(max_num_seqs,
    KV tokens / (P + O/2)): μ = n_max / (O·T(n_max) + p1·(1 + n_max)).
    """

    def __init__(self, p: ReplicaProfile, prompt: float, output: float, uncached: float) -> None:
        self.p = p
        self.output = output
        self.context = max(prompt + output / 2.0, 1.0)
        self.prefill_s = uncached * p.prefill_s_per_token
        self.b = p.decode_s_per_seq + self.context * p.kv_read_s_per_token
        self.n_max = max(min(float(p.max_num_seqs), p.kv_capacity_tokens / self.context), 1e-9)
        self.capacity = self.n_max / (output * self.step_time(self.n_max) + self.prefill_s * (1 + self.n_max))

    def step_time(self, n: float) -> float:
        return self.p.base_s + n * self.b

    def in_flight(self, a: float) -> float:
        if a <= 0:
            return 0.0
        denom = 1.0 - a * self.prefill_s - a * self.output * self.b
        if denom <= 0:
            return self.n_max
        return min(self.n_max, a * (self.output * self.p.base_s + self.prefill_s) / denom)


def _bucket(v: float) -> int:
    return bisect_left(TTFT_BUCKETS, v)
