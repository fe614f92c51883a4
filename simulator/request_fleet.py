"""The request-level fleet: arrivals from a trace routed to replicas, replica lifecycle, GPUs and faults."""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Collection

import numpy as np

from simulator.config import FleetConfig
from simulator.faults import Fault
from simulator.gpus import HANGING_XIDS, VANISHING_XIDS, Gpu, Nodes
from simulator.profile import ReplicaProfile
from simulator.replica import FinishedRequest, Replica
from simulator.routing import make_router
from simulator.snapshot import FleetSnapshot, GpuSnapshot, ReplicaSnapshot
from simulator.trace.model import Request, Trace


@dataclasses.dataclass
class _Rollout:
    old: list[str]  # replicas to replace, by name
    wave_size: int
    profile: ReplicaProfile
    controller: str = "deployment"
    wave: set[str] = dataclasses.field(default_factory=set)  # the current wave's new replicas (controller "waves")


class RequestFleet:
    # What a new replica is; a disaggregated deployment's decode pool runs replicas that receive KV (simulator.disagg).
    replica_class: type[Replica] = Replica

    def __init__(self, config: FleetConfig, trace: Trace) -> None:
        self.cfg = config
        self.trace = trace
        cols = trace.columns
        self._arrivals = cols.arrival_s.tolist()
        self._prompts = cols.prompt_tokens.tolist()
        self._outputs = cols.output_tokens.tolist()
        self._blocks = cols.prefix_blocks
        self._next = 0
        self._loop_offset = 0.0
        self._injected: list[tuple[float, int, Request]] = []
        self._injected_seq = 0
        self.time = 0.0
        self.arrivals_total = 0
        self.routing = config.routing
        self._router = make_router(config.routing)
        self.nodes = Nodes(config.profile.gpu, config.gpus_per_node)
        self.replicas: list[Replica] = []
        self._gpus: dict[str, list[Gpu]] = {}
        self._backlog: deque[tuple[Request, float]] = deque()
        self._finished: list[FinishedRequest] = []
        self._serial = 0
        self._busy_seen: dict[str, float] = {}
        self.profile = config.profile  # what new replicas run; a rollout switches it when it completes
        self._rollout: _Rollout | None = None
        for _ in range(config.replicas):
            self._add_replica(ready_at=0.0 if config.start_ready else config.cold_start_s)

    # -- public ------------------------------------------------------------------------------------------------
    def set_replicas(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"replica count must be >= 0, got {n}")
        active = [r for r in self.replicas if not r.draining]
        # Replicas added while a rollout runs start on the new version (a Deployment scaled mid-rollout adds them to
        # its new ReplicaSet), so a surge asked for during the rollout is not itself left to be rolled.
        profile = self._rollout.profile if self._rollout is not None else None
        for _ in range(n - len(active)):
            self._add_replica(ready_at=self.time + self.cfg.cold_start_s, profile=profile)
        if n < len(active):
            # Remove loading replicas first (newest first), then drain the newest ready ones.
            order = sorted(active, key=lambda r: (r.ready(self.time), -r.started_s))
            for r in order[: len(active) - n]:
                r.draining = True
            self._reap()

    def advance_to(self, t: float) -> None:
        if t < self.time:
            raise ValueError(f"cannot advance backwards from {self.time} to {t}")
        while True:
            a = self._peek_arrival()
            if a is None or a > t:
                break
            req = self._pop_arrival()
            self._advance_replicas(req.arrival_s)
            self.arrivals_total += 1
            self._route(req, req.arrival_s)
        self._advance_replicas(t)

    def inject(self, fault: Fault) -> None:
        handler = getattr(self, f"_fault_{fault.type}")
        handler(fault)

    def evict(self, name: str) -> int:
        """Delete a replica's pod, as a drain's eviction (or `kubectl delete pod`) does: it leaves the endpoints at
        once, the requests it held are retried through the gateway (keeping their arrival time, so the wait counts
        in their TTFT), and its ReplicaSet starts a replacement (cold start) on a healthy GPU. Returns the number
        of requests retried."""
        r = next((x for x in self.replicas if x.name == name), None)
        if r is None:
            raise KeyError(f"no replica {name!r} (replicas: {', '.join(x.name for x in self.replicas)})")
        stranded = sorted((s.req for s in (*r.running, *r.waiting)), key=lambda q: q.arrival_s)
        self._finished.extend(r.finished)
        self.replicas.remove(r)
        self.nodes.release(self._gpus.pop(r.name))
        self._busy_seen.pop(r.name, None)
        if not r.draining:
            self._add_replica(ready_at=self.time + self.cfg.cold_start_s)
        for req in stranded:
            self._route(req, self.time)
        return len(stranded)

    def in_flight(self) -> list[tuple[float, float | None]]:
        """(arrival_s, TTFT so far or None) of every request that arrived and has not finished: waiting at the
        gateway, queued or running on a replica."""
        out: list[tuple[float, float | None]] = [(req.arrival_s, None) for req, _ in self._backlog]
        for r in self.replicas:
            for s in (*r.running, *r.waiting):
                out.append((s.req.arrival_s, s.first_token_s - s.req.arrival_s if s.first_token_s >= 0 else None))
        return out

    def finished(self) -> list[FinishedRequest]:
        return self._finished

    def fork(self, cold_start_s: float | None = None) -> RequestFleet:
        """A deep copy sharing the read-only trace columns, with no finished requests of its own."""
        shared = (self.trace, self._arrivals, self._prompts, self._outputs, self._blocks)
        memo: dict[int, object] = {id(x): x for x in shared}
        memo[id(self._finished)] = []
        twin = copy.deepcopy(self, memo)
        if cold_start_s is not None:
            twin.cfg = dataclasses.replace(self.cfg, cold_start_s=cold_start_s)
        return twin

    @property
    def ready_count(self) -> int:
        return sum(1 for r in self.replicas if r.ready(self.time) and not r.draining)

    def snapshot(self, replicas: Collection[str] | None = None) -> FleetSnapshot:
        reps = [self._replica_snapshot(r) for r in self.replicas if replicas is None or r.name in replicas]
        gpus: list[GpuSnapshot] = [g.snapshot() for g in self.nodes.all()]
        return FleetSnapshot(self.time, self.arrivals_total, len(self._backlog), self.routing, reps, gpus)

    # -- arrivals and routing ----------------------------------------------------------------------------------
    def _peek_arrival(self) -> float | None:
        if self._next >= len(self._arrivals) and self.cfg.loop and self._arrivals:
            # Replay the trace again from its start, shifted by its duration (live fleets that never end).
            self._loop_offset += max(self.trace.duration_s, self._arrivals[-1] + 1e-6)
            self._next = 0
        a = self._arrivals[self._next] + self._loop_offset if self._next < len(self._arrivals) else math.inf
        b = self._injected[0][0] if self._injected else math.inf
        m = min(a, b)
        return None if m == math.inf else m

    def _pop_arrival(self) -> Request:
        off = self._loop_offset
        if self._injected and (
            self._next >= len(self._arrivals) or self._injected[0][0] < self._arrivals[self._next] + off
        ):
            return heapq.heappop(self._injected)[2]
        i = self._next
        self._next += 1
        return Request(self._arrivals[i] + off, self._prompts[i], self._outputs[i], self._blocks[i])

    def _route(self, req: Request, now: float) -> None:
        ready = [r for r in self.replicas if not r.draining and r.ready(now)]
        if not ready:
            self._backlog.append((req, now))
            return
        self._router.choose(req, ready).submit(req, now)

    def _advance_replicas(self, t: float) -> None:
        prev = self.time
        for r in self.replicas:
            r.advance_to(t)
            if r.finished:
                self._finished.extend(r.finished)
                r.finished.clear()
        self.time = max(self.time, t)
        if self._backlog and self.ready_count:
            pending, self._backlog = self._backlog, deque()
            for req, _ in pending:
                self._route(req, t)
        self._reap()
        if self._rollout is not None:
            self._rollout_wave()
        self._update_gpus(self.time - prev)

    def _reap(self) -> None:
        gone = [r for r in self.replicas if r.draining and (r.load == 0 or not r.ready(self.time))]
        for r in gone:
            self.replicas.remove(r)
            self.nodes.release(self._gpus.pop(r.name))
            self._busy_seen.pop(r.name, None)

    # -- replicas and GPUs -------------------------------------------------------------------------------------
    def _add_replica(self, *, ready_at: float, profile: ReplicaProfile | None = None) -> Replica:
        name = f"{self.cfg.deployment}-{self._serial:04d}"
        self._serial += 1
        r = self.replica_class(name, profile or self.profile, now=self.time, ready_at=ready_at)
        self.replicas.append(r)
        self._gpus[name] = self.nodes.place(name, r.profile.gpus_per_replica)
        return r

    def node_of(self, r: Replica) -> str:
        return self._gpus[r.name][0].node

    def _update_gpus(self, dt: float) -> None:
        if dt <= 0:
            return
        p = self.cfg.profile
        per_gpu_weights = p.weights_bytes // p.gpus_per_replica
        reserved = int(p.gpu.memory_bytes * p.gpu_memory_utilization)
        for r in self.replicas:
            busy = r.c.busy_s - self._busy_seen.get(r.name, 0.0)
            self._busy_seen[r.name] = r.c.busy_s
            if r.ready(self.time):
                mem = reserved
            else:  # weights stream in while loading
                frac = (self.time - r.started_s) / max(r.ready_at - r.started_s, 1e-9)
                mem = int(per_gpu_weights * min(max(frac, 0.0), 1.0))
            for g in self._gpus[r.name]:
                g.memory_used = mem
                g.advance(dt, busy / dt)
        for g in self.nodes.all():
            if not g.pod:
                g.advance(dt, 0.0)

    def _replica_snapshot(self, r: Replica) -> ReplicaSnapshot:
        p = r.profile
        c = r.c
        if not r.ready(self.time):
            state = "loading"
        elif r.hung:
            state = "hung"
        elif r.draining:
            state = "draining"
        else:
            state = "ready"
        return ReplicaSnapshot(
            name=r.name,
            node=self.node_of(r),
            state=state,
            model_name=p.model_name,
            requests_waiting=len(r.waiting),
            requests_running=len(r.running),
            kv_usage=r.pool.usage,
            kv_capacity_tokens=p.kv_capacity_tokens,
            num_gpu_blocks=p.num_gpu_blocks,
            block_size=p.block_size,
            prompt_tokens_total=c.prompt_tokens,
            generation_tokens_total=c.generation_tokens,
            prefix_queries_total=c.prefix_queries,
            prefix_hits_total=c.prefix_hits,
            preemptions_total=c.preemptions,
            requests_finished_total=c.finished,
            requests_aborted_total=c.aborted,
            started_s=r.started_s,
            ttft=c.ttft.copy(),
            itl=c.itl.copy(),
            e2e=c.e2e.copy(),
            queue_time=c.queue.copy(),
            prefill_time=c.prefill.copy(),
            decode_time=c.decode.copy(),
            inference_time=c.inference.copy(),
            prompt_len=c.prompt_len.copy(),
            output_len=c.output_len.copy(),
            gpu_uuids=tuple(g.uuid for g in self._gpus[r.name]),
        )

    # -- faults --------------------------------------------------------------------------------------------------
    def _replica_on(self, gpu: Gpu) -> Replica | None:
        return next((r for r in self.replicas if r.name == gpu.pod), None)

    def _fault_xid(self, f: Fault) -> None:
        g = self.nodes.find(f.node, f.gpu)
        g.last_xid = f.xid
        if f.xid in VANISHING_XIDS:
            g.vanished = True
        if f.xid in HANGING_XIDS:
            self._hang(g)

    def _hang(self, g: Gpu) -> None:
        g.hung = True
        r = self._replica_on(g)
        if r is not None:
            r.hung = True

    def _fault_hung_gpu(self, f: Fault) -> None:
        self._hang(self.nodes.find(f.node, f.gpu))

    def _fault_vanish_gpu(self, f: Fault) -> None:
        self.nodes.find(f.node, f.gpu).vanished = True

    def _fault_recover(self, f: Fault) -> None:
        g = self.nodes.find(f.node, f.gpu)
        g.hung = g.vanished = False
        g.last_xid = 0
        r = self._replica_on(g)
        if r is not None and not any(x.hung for x in self._gpus[r.name]):
            r.hung = False

    def _fault_crash(self, f: Fault) -> None:
        r = next((x for x in self.replicas if x.name == f.replica), None)
        if r is None:
            raise KeyError(f"no replica {f.replica!r} (replicas: {', '.join(x.name for x in self.replicas)})")
        r.restart(self.time, self.time + self.cfg.cold_start_s)
        for g in self._gpus[r.name]:
            g.hung = False

    def _fault_kv_pressure(self, f: Fault) -> None:
        for i in range(f.count):
            t = self.time + f.duration_s * i / max(f.count, 1)
            req = Request(t, f.prompt_tokens, f.output_tokens, ())
            self._injected_seq += 1
            heapq.heappush(self._injected, (t, self._injected_seq, req))

    def _fault_rollout(self, f: Fault) -> None:
        if self._rollout is not None:
            raise ValueError("a rollout is already in progress")
        p = self.profile
        new = dataclasses.replace(
            p,
            model_name=f.model_name or p.model_name,
            base_s=p.base_s / f.speed,
            prefill_s_per_token=p.prefill_s_per_token / f.speed,
            decode_s_per_seq=p.decode_s_per_seq / f.speed,
            kv_read_s_per_token=p.kv_read_s_per_token / f.speed,
        )
        old = [r.name for r in self.replicas if not r.draining]
        self._rollout = _Rollout(old=old, wave_size=f.wave_size, profile=new, controller=f.controller)
        self._rollout_wave()

    def _rollout_wave(self) -> None:
        ro = self._rollout
        assert ro is not None
        if ro.controller == "waves":
            self._fixed_wave(ro)
        else:
            self._controller_step(ro)

    def _controller_step(self, ro: _Rollout) -> None:
        """One reconcile of Kubernetes' Deployment controller running a RollingUpdate with maxSurge 0 and
        maxUnavailable the wave size (pkg/controller/deployment/rolling.go: reconcileOldReplicaSets,
        cleanupUnhealthyReplicas, scaleDownOldReplicaSetsForRollingUpdate, NewRSNewReplicas). spec.replicas is the
        fleet's count of live pods (``set_replicas`` keeps it). Old pods go only while more than spec.replicas -
        maxUnavailable pods would stay available, unhealthy (loading) old pods first since removing them costs no
        availability; new pods are created up to spec.replicas. So a count raised before a wave holds the fleet's
        availability, where fixed waves would drain a whole wave whatever spec.replicas says."""
        now = self.time
        live = [r for r in self.replicas if not r.draining]
        old = [r for r in live if r.name in ro.old]
        if not old:
            self.profile = ro.profile
            self._rollout = None
            return
        spec = len(live)
        min_available = spec - ro.wave_size
        # maxUnavailable, less the new pods not ready yet: how many old pods may go this reconcile
        may_go = ro.wave_size - sum(1 for r in live if r.name not in ro.old and not r.ready(now))
        if may_go > 0:
            for r in [r for r in old if not r.ready(now)][:may_go]:
                r.draining = True
            available = sum(1 for r in live if not r.draining and r.ready(now))
            for r in [r for r in old if r.ready(now) and not r.draining][: max(available - min_available, 0)]:
                r.draining = True
        for _ in range(spec - sum(1 for r in self.replicas if not r.draining)):
            self._add_replica(ready_at=now + self.cfg.cold_start_s, profile=ro.profile)
        self._reap()

    def _fixed_wave(self, ro: _Rollout) -> None:
        """Start the next wave once the previous wave's replicas are ready, whatever spec.replicas says (the
        simulator's rollout until 2026-12-04, kept as controller "waves" to reproduce earlier figures)."""
        if any(r.name in ro.wave and not r.ready(self.time) for r in self.replicas):
            return
        remaining = [r for r in self.replicas if r.name in ro.old and not r.draining]
        if not remaining:
            self.profile = ro.profile
            self._rollout = None
            return
        batch = remaining[: ro.wave_size]
        for r in batch:
            r.draining = True
        ready_at = self.time + self.cfg.cold_start_s
        ro.wave = {self._add_replica(ready_at=ready_at, profile=ro.profile).name for _ in batch}
        self._reap()

    def _fault_routing(self, f: Fault) -> None:
        self._router = make_router(f.routing)
        self.routing = f.routing

    def ttft_samples(self) -> tuple[np.ndarray, np.ndarray]:
        v = np.fromiter((f.ttft_s for f in self._finished), dtype=np.float64, count=len(self._finished))
        return v, np.ones_like(v)

    def ttft_arrivals(self) -> np.ndarray:
        return np.fromiter((f.arrival_s for f in self._finished), dtype=np.float64, count=len(self._finished))
