"""Replay one trace under each policy, in virtual time, on identical simulated fleets.

Every policy gets the same trace, replica profile, cold start, routing, seed, replica ceiling, starting fleet
(sized for the first minute's demand, as a fleet that was already running) and the same capacity, taken from the
replica's serving profile (the simulator's replica model, as a benchmark of the replica would give it) and never
from the scored trace. The loop ticks every 5 s: advance the simulator, observe, and on each policy's own
interval ask it for a replica count. The frontier (`frontier.py`) is measured the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scaler.backtest import faults as replica_faults
from scaler.backtest import sim
from scaler.backtest.faults import FaultHit, FaultSpec
from scaler.backtest.frontier import WINDOW_S, Frontier
from scaler.backtest.frontier import frontier as find_frontier
from scaler.backtest.gateway import DEFAULT_SCRAPE_INTERVAL_S
from scaler.backtest.mase import forecast_mase
from scaler.backtest.observe import FleetCounters, History, from_snapshot
from scaler.backtest.policies import POLICIES, Context, Policy
from scaler.backtest.policies.base import ARRIVALS
from scaler.backtest.policies.kvpilot import DEPLOYMENT, NAMESPACE, Kvpilot
from scaler.backtest.result import PolicyResult, RolloutWindow, ttft_stats, worst_minutes
from scaler.capacity import CapacityConfig, ServingProfile, TokenMix
from scaler.cost import DEFAULT_GPU_PRICES, GpuPrice, gpu_type_of
from scaler.decision import Decision
from scaler.planner import PlannerConfig, planner_config
from scaler.rollout import DeploymentRollout
from scaler.rollout_stage import RolloutStage

TICK_S = 5.0
# The fluid level replays days: a 30 s tick keeps a 10-day trace within minutes per policy. Every policy's
# interval is then a multiple of 30 s (reactive's 15 s polling and KPA's 5 s refresh included), for all alike.
FLUID_TICK_S = 30.0
ORACLE_BIN_S = 10.0
WARMUP_S = 60.0
# Peers that need a capacity (dynamo, dynamo-sla) plan at this share of the profile's saturated throughput:
# kvpilot's default target utilisation, so that every policy plans on the same number.
PLANNED_UTILISATION = 0.8
KEDA_MAX_REPLICAS = 100  # kedacore/keda ScaledObject maxReplicaCount default (docs: "maxReplicaCount: 100")
REQUEST_LEVEL_MAX_REQUESTS = 300_000
REQUEST_LEVEL_MAX_S = 12 * 3600.0
ROUTING = "least_loaded"

Progress = Callable[[str, float], None]  # (policy, share of its replay done)
# What a scale source that reads Kubernetes tells the rollout stage at a tick, from the simulator's snapshot: each
# Deployment's rollout status and the count asked for (None: the simulator's own, as without Kubernetes).
# bench/rollout.py's kvpilot-k8s (the API server) and kvpilot-ksm (kube-state-metrics through Prometheus) give one.
ScaleRead = Callable[[Any, float], tuple[Mapping[str, DeploymentRollout] | None, int | None]]


@dataclass(frozen=True)
class BacktestConfig:
    cold_start_s: float = 120.0
    slo_ttft_s: float = 2.0
    policies: tuple[str, ...] = ("reactive", "kvpilot")
    fidelity: str | None = None  # None: request level unless the trace is too long or too large
    min_replicas: int = 1
    max_replicas: int = KEDA_MAX_REPLICAS  # the same ceiling for every policy
    seed: int = 0
    rate_scale: float = 1.0
    capacity_rps: float | None = None  # None: from the replica's serving profile at the trace's mean mix
    start_s: float | None = None  # replay only part of the trace
    duration_s: float | None = None
    tick_s: float = TICK_S  # kvpilot's control-loop interval
    planner: PlannerConfig | None = None  # kvpilot's configuration; None: kvpilot's defaults for these facts
    # What kvpilot's planner reads as arrivals (`ARRIVALS`): "engines", the engines' estimate in FleetState as
    # `kvpilot run` reads it by default (no gateway rate source); "gateway", the router's request counter as
    # Prometheus scrapes it every `gateway_scrape_s`, read as `kvpilot run` reads `collector.arrivals`
    # (`scaler.backtest.gateway`, `collector.counter_rates.CounterRates`).
    arrivals: str = "engines"
    gateway_scrape_s: float = DEFAULT_SCRAPE_INTERVAL_S
    frontier: bool = True  # search the cost/SLO frontier (the costliest part of a backtest)
    # Dollars beside replica-hours (docs/cost.md): the GPU type and GPUs per replica the replica-hours are priced at
    # (None: the simulated replica's own), at that type's price in `gpu_prices` (`cost.gpus` in settings).
    gpu_type: str | None = None
    gpus_per_replica: int | None = None
    gpu_prices: Mapping[str, GpuPrice] = field(default_factory=lambda: dict(DEFAULT_GPU_PRICES))
    # A rolling update injected into every policy's replay at this second (None: none): the simulator's `rollout`
    # fault, maxSurge 0, waves of `rollout_wave`, the new version `rollout_speed` times as fast. kvpilot's replay
    # runs the control loop's rollout stage after its planner, as `kvpilot run` does. Request level only.
    rollout_at_s: float | None = None
    rollout_wave: int = 1
    rollout_speed: float = 1.0
    rollout_controller: str = "deployment"  # the simulator's model of the rollout's controller (docs/simulator.md)
    # Replicas lost to a GPU fault, the same for every policy (`scaler.backtest.faults`): at the same time, on the
    # replica one rule picks, replaced by the cluster after the same delay. "peak" is fixed by `backtest` for the
    # trace before any policy runs. The frontier is searched without faults, so it is refused with them.
    faults: tuple[FaultSpec, ...] = ()

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {', '.join(unknown)}; known: {', '.join(POLICIES)}")
        if not self.policies:
            raise ValueError("no policies to backtest")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {self.arrivals!r}")
        if not (math.isfinite(self.gateway_scrape_s) and self.gateway_scrape_s > 0):
            raise ValueError(f"gateway_scrape_s must be > 0 and finite, got {self.gateway_scrape_s}")
        if self.fidelity not in (None, "request", "fluid"):
            raise ValueError(f"fidelity must be 'request' or 'fluid', got {self.fidelity!r}")
        if self.cold_start_s < 0 or self.slo_ttft_s <= 0:
            raise ValueError("cold_start_s must be >= 0 and slo_ttft_s > 0")
        if self.max_replicas < max(self.min_replicas, 1):
            raise ValueError(f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")
        if self.gpu_type is not None and self.gpu_type not in self.gpu_prices:
            known = ", ".join(sorted(self.gpu_prices))
            raise ValueError(f"GPU type {self.gpu_type!r} has no price (known: {known}); add it to cost.gpus")
        if self.gpus_per_replica is not None and self.gpus_per_replica < 1:
            raise ValueError(f"gpus_per_replica must be >= 1, got {self.gpus_per_replica}")
        if self.rollout_at_s is not None and not (math.isfinite(self.rollout_at_s) and self.rollout_at_s >= 0):
            raise ValueError(f"rollout_at_s must be a finite number >= 0, got {self.rollout_at_s}")
        if self.rollout_wave < 1 or not (math.isfinite(self.rollout_speed) and self.rollout_speed > 0):
            raise ValueError("rollout_wave must be >= 1 and rollout_speed > 0")
        if self.rollout_at_s is not None and self.fidelity == "fluid":
            raise ValueError("a rollout needs the request level (fidelity 'request')")
        if self.rollout_controller not in sim.rollout_controllers():
            known = ", ".join(sim.rollout_controllers())
            raise ValueError(f"rollout_controller must be one of {known}, got {self.rollout_controller!r}")
        for f in self.faults:
            if f.at_s is not None and not (math.isfinite(f.at_s) and f.at_s > 0):
                raise ValueError(f"fault {f.kind}@{f.at_s:g}: not within the replay (it must be after 0 s)")
        if self.faults and self.frontier:
            raise ValueError("the frontier is searched without faults: a backtest with faults needs --no-frontier")


@dataclass
class Report:
    trace: str
    fidelity: str
    duration_s: float
    capacity_rps: float
    policies: dict[str, PolicyResult] = field(default_factory=dict)
    requests: int = 0  # arrivals in the replay (expected ones for a ServeGen directory, whose arrivals are sampled)
    mase: float = math.nan
    mase_forecaster: str = ""
    horizon_s: float = 0.0
    kvpilot_config: dict[str, Any] = field(default_factory=dict)
    arrivals: str = "engines"  # what kvpilot's planner read as arrivals (BacktestConfig.arrivals)
    # with "gateway": how it read the router's counter (scrape interval, rate window, series)
    gateway: dict[str, Any] | None = None
    frontier: Frontier | None = None
    faults: list[FaultSpec] = field(default_factory=list)  # as injected into every replay, "peak" resolved
    gpu_type: str = "H100"  # what a replica-hour is priced at: replica-h x gpus_per_replica x price per GPU-hour
    gpus_per_replica: int = 1
    price_per_gpu_hour_usd: float = DEFAULT_GPU_PRICES["H100"].price_per_hour_usd

    def cost_usd(self, name: str) -> float:
        """What policy `name`'s replica-hours cost: replica-h x GPUs per replica x price per GPU-hour."""
        return self.policies[name].replica_hours * self.gpus_per_replica * self.price_per_gpu_hour_usd

    def frontier_ratio(self, name: str) -> float | None:
        r = self.policies[name]
        return None if self.frontier is None else self.frontier.ratio(r.slo_attainment, r.replica_hours)

    def to_json(self) -> dict[str, Any]:
        """{"trace", "fidelity", "duration_s" and "requests" (what was replayed), "capacity_rps",
        "policies": {name: {five numbers, "cost_usd", "frontier_ratio",
        "worst_minutes"}}, "forecast": {"mase": x},
        "kvpilot_config": {...}, "arrivals": "engines" | "gateway",
        "gateway": {"series", "scrape_interval_s", "rate_window_s", "reader"} (with "gateway" only),
        "cost": {"gpu_type", "gpus_per_replica", "price_per_gpu_hour_usd"},
        "frontier": [{"slo_target", "slo_attainment", "replica_hours", "cost_usd"}…]}."""
        mase = round(self.mase, 4) if math.isfinite(self.mase) else None
        policies: dict[str, Any] = {}
        for name, r in self.policies.items():
            ratio = self.frontier_ratio(name)
            policies[name] = {
                **r.summary(),
                "cost_usd": round(self.cost_usd(name), 2),
                "frontier_ratio": None if ratio is None else round(ratio, 4),
            }
            if r.rollout is not None:
                policies[name]["rollout"] = r.rollout.to_json()
            if self.faults:
                policies[name]["faults"] = [h.to_json() for h in r.faults]
            policies[name]["worst_minutes"] = [m.to_json() for m in r.worst_minutes]
        out: dict[str, Any] = {
            "trace": self.trace,
            "fidelity": self.fidelity,
            "duration_s": round(self.duration_s, 3),
            "requests": self.requests,
            "capacity_rps": round(self.capacity_rps, 6),
            "policies": policies,
            "forecast": {"mase": mase, "forecaster": self.mase_forecaster, "horizon_s": self.horizon_s},
            "kvpilot_config": self.kvpilot_config,
            "arrivals": self.arrivals,
            **({} if self.gateway is None else {"gateway": dict(self.gateway)}),
            "cost": {
                "gpu_type": self.gpu_type,
                "gpus_per_replica": self.gpus_per_replica,
                "price_per_gpu_hour_usd": self.price_per_gpu_hour_usd,
            },
        }
        if self.faults:
            out["faults"] = [f.to_json() for f in self.faults]
        if self.frontier is not None:
            usd = self.gpus_per_replica * self.price_per_gpu_hour_usd  # per replica-hour
            out["frontier"] = [
                {**p, "cost_usd": None if p["replica_hours"] is None else round(p["replica_hours"] * usd, 2)}
                for p in self.frontier.to_json()
            ]
            out["frontier_points"] = [p.to_json() for p in self.frontier.points]
            out["frontier_seeds"] = list(self.frontier.seeds)
        return out


def choose_fidelity(trace: Any, requested: str | None) -> str:
    if requested:
        return requested
    big = trace.expected_requests() > REQUEST_LEVEL_MAX_REQUESTS or trace.duration_s > REQUEST_LEVEL_MAX_S
    return "fluid" if big else "request"


def serving_profile() -> ServingProfile:
    """The simulated replica as a benchmark of it reads (the simulator's replica model; never the scored trace)."""
    return ServingProfile(**sim.serving_profile_fields())  # type: ignore[arg-type]


def replica_gpus(cfg: BacktestConfig) -> tuple[str, int, float]:
    """(GPU type, GPUs per replica, price per GPU-hour) the replica-hours are priced at: the configured ones, else
    the simulated replica's own GPU and count."""
    replica = sim.replica_profile()
    gpu_type = cfg.gpu_type or gpu_type_of(replica.gpu.name, cfg.gpu_prices)
    if gpu_type is None:
        known = ", ".join(sorted(cfg.gpu_prices))
        raise ValueError(f"the simulated replica's GPU {replica.gpu.name!r} has no price (known: {known})")
    gpus = cfg.gpus_per_replica or int(replica.gpus_per_replica)
    return gpu_type, gpus, cfg.gpu_prices[gpu_type].price_per_hour_usd


def mean_mix(trace: Any) -> TokenMix:
    rs = trace.rate_series(ORACLE_BIN_S)
    used = [
        (float(r), float(p), float(o))
        for r, p, o in zip(rs.req_per_s, rs.mean_prompt_tokens, rs.mean_output_tokens, strict=True)
        if r > 0 and math.isfinite(float(p)) and math.isfinite(float(o))
    ]
    total = sum(r for r, _, _ in used)
    if not used or total <= 0:
        return TokenMix(1.0, 1.0)
    return TokenMix(sum(r * p for r, p, _ in used) / total, sum(r * o for r, _, o in used) / total)


def kvpilot_planner(cfg: BacktestConfig, profile: ServingProfile) -> PlannerConfig:
    """kvpilot's configuration for this backtest: the one given (built from settings as `kvpilot run` builds it),
    else kvpilot's defaults for the backtest's facts. Where it knows no capacity, the replica's serving profile
    fills it, as an operator would configure it."""
    base = cfg.planner
    if base is None:
        base = planner_config(
            cold_start_s=cfg.cold_start_s,
            tick_s=cfg.tick_s,
            min_replicas=cfg.min_replicas,
            max_replicas=cfg.max_replicas,
            capacity=CapacityConfig(),
            slo_ttft_s=cfg.slo_ttft_s,
        )
    c = base.capacity
    if c.profile is None and c.requests_per_s is None:
        base = dataclasses.replace(base, capacity=dataclasses.replace(c, profile=profile))
    return base


def context_for(trace: Any, cfg: BacktestConfig) -> Context:
    """Every policy's context for a replay of ``trace``: the capacity the peers plan on (the replica's serving
    profile at the trace's mean mix, at the planned utilisation, unless configured) and kvpilot's planner."""
    profile = serving_profile()
    capacity = cfg.capacity_rps or PLANNED_UTILISATION * profile.requests_per_s(mean_mix(trace))
    return build_context(trace, cfg, capacity, kvpilot_planner(cfg, profile))


def build_context(
    trace: Any, cfg: BacktestConfig, capacity_rps: float, planner: PlannerConfig | None = None
) -> Context:
    rs = trace.rate_series(ORACLE_BIN_S)
    mix = mean_mix(trace)
    return Context(
        cold_start_s=cfg.cold_start_s,
        slo_ttft_s=cfg.slo_ttft_s,
        capacity_rps=capacity_rps,
        mean_prompt_tokens=mix.prompt_tokens,
        mean_output_tokens=mix.output_tokens,
        min_replicas=cfg.min_replicas,
        max_replicas=cfg.max_replicas,
        future_rate=(tuple(float(t) for t in rs.times_s), tuple(float(x) for x in rs.req_per_s)),
        bin_s=ORACLE_BIN_S,
        tick_s=cfg.tick_s,
        planner=planner,
        arrivals=cfg.arrivals,
        gateway_scrape_s=cfg.gateway_scrape_s,
    )


def initial_replicas(ctx: Context) -> int:
    first = [r for t, r in zip(*ctx.future_rate, strict=True) if t < 60.0] or [0.0]
    return ctx.clamp(math.ceil(max(first) / ctx.capacity_rps - 1e-9))


def run_policy(
    trace: Any,
    policy: Policy,
    ctx: Context,
    cfg: BacktestConfig,
    fidelity: str,
    progress: Progress | None = None,
    *,
    fleet: Any = None,
    scale_read: ScaleRead | None = None,
    until: Callable[[float, PolicyResult], bool] | None = None,
) -> PolicyResult:
    """Replay ``policy`` over ``trace``. ``fleet``: a simulated fleet to replay on (bench/rollout.py's, of its own
    size; None: one sized for the first minute, ``initial_replicas``); ``scale_read``: what a scale source reading
    Kubernetes hands kvpilot's rollout stage each tick (None: the simulator's count alone); ``until``: asked after
    each tick (its time, the result so far), the replay ends at the first tick it holds (None: the trace's end;
    request level), measured as a trace that ends there (bench/rollout.py's window that follows the rollout)."""
    if fleet is None:
        start = initial_replicas(ctx)
        fleet = sim.make_fleet(
            trace, replicas=start, cold_start_s=cfg.cold_start_s, fidelity=fidelity, seed=cfg.seed, routing=ROUTING
        )
    else:
        start = sim.replica_count(fleet)
    history, counters = History(max_s=3600.0), FleetCounters()
    result = PolicyResult(policy.name, 0.0, 0.0, 0.0, 0.0, 0, 0)
    policy.start(start, 0.0)
    # Nobody decides before the first full minute: every rate window a policy reads must be complete.
    desired, next_decision, replica_s = start, WARMUP_S, 0.0
    tick = FLUID_TICK_S if fidelity == "fluid" else TICK_S
    steps = max(1, math.ceil(trace.duration_s / tick))
    stage = RolloutStage() if cfg.rollout_at_s is not None and isinstance(policy, Kvpilot) else None
    rolling = False  # a rollout injected and not done yet
    faults = _Faults(cfg.faults, result.faults, stage)
    for i in range(steps + 1):
        t = min(i * tick, trace.duration_s)
        fleet.advance_to(t)
        faults.apply(fleet, t)
        if cfg.rollout_at_s is not None and result.rollout is None and t + 1e-9 >= cfg.rollout_at_s:
            fleet.inject(
                sim.rollout_fault(
                    wave_size=cfg.rollout_wave, speed=cfg.rollout_speed, controller=cfg.rollout_controller
                )
            )
            result.rollout, rolling = RolloutWindow(t, trace.duration_s), True
        snap = fleet.snapshot()
        if rolling and result.rollout is not None and sim.rolled(snap.replicas):
            result.rollout.end_s, rolling = t, False
        obs = from_snapshot(snap, counters)
        history.add(obs)
        if i > 0:
            replica_s += len(snap.replicas) * (t - result.times[-1])
        result.times.append(t)
        result.replicas.append(len(snap.replicas))
        result.ready.append(len(obs.ready))
        result.demand.append(history.arrival_rate(60.0))
        if t + 1e-9 >= next_decision:
            if isinstance(policy, Kvpilot):
                policy.snapshot = snap
            want = ctx.clamp(policy.decide(history, t))
            if stage is not None and isinstance(policy, Kvpilot):
                want = ctx.clamp(_surge(stage, policy, snap, want, len(obs.ready), t, scale_read))
            if want != desired:
                result.scale_events += 1
                desired = want
            fleet.set_replicas(desired)
            next_decision = t + policy.interval_s
        result.desired.append(desired)
        if progress is not None and i % 50 == 0:
            progress(policy.name, i / steps)
        if until is not None and t < trace.duration_s and until(t, result):
            trace = _ended_at(trace, t, fidelity)
            break
    result.replica_hours = replica_s / 3600.0
    _measure(fleet, trace, cfg, fidelity, result)
    if result.rollout is not None:
        _measure_rollout(fleet, trace, cfg, result.rollout)
    result.forecasts = policy.forecasts
    if progress is not None:
        progress(policy.name, 1.0)
    return result


class _Faults:
    """Injects ``BacktestConfig.faults`` into one replay, each at its first tick at or after its time where a
    replica serves, and replaces the replica as the cluster would (``scaler.backtest.faults``); records each in
    ``hits``. ``stage``: kvpilot's rollout stage, told of each eviction as the drain actuator tells it."""

    def __init__(self, specs: Sequence[FaultSpec], hits: list[FaultHit], stage: RolloutStage | None) -> None:
        for f in specs:
            if f.at_s is None:
                raise ValueError("a fault at 'peak' must be resolved for the trace first (faults.resolve)")
        self.pending = sorted(specs, key=lambda f: f.at_s or 0.0)
        self.hits, self.stage = hits, stage
        self.evictions: list[tuple[float, FaultHit]] = []  # (due, the fault's hit)

    def apply(self, fleet: Any, t: float) -> None:
        """At tick ``t``, after the fleet has advanced to it and before anyone observes it."""
        if self.pending and t + 1e-9 >= (self.pending[0].at_s or 0.0):
            self._inject(fleet, t)
        for e in [e for e in self.evictions if t + 1e-9 >= e[0]]:
            self.evictions.remove(e)
            self._evict(fleet, e[1], t)

    def _inject(self, fleet: Any, t: float) -> None:
        snap = fleet.snapshot()
        stuck = {h.replica for h in self.hits if h.stuck}
        while self.pending and t + 1e-9 >= (self.pending[0].at_s or 0.0):
            victim = replica_faults.choose(snap.replicas, stuck)
            if victim is None:
                return  # no replica serves: the fault waits for one
            f = self.pending.pop(0)
            ready_before = sum(1 for r in snap.replicas if r.state == "ready" and r.name not in stuck)
            fleet.inject(sim.xid_fault(snap, victim.name, f.xid))
            held = int(victim.requests_running + victim.requests_waiting)
            hit = FaultHit(f.kind, t, victim.name, held, ready_before)
            self.hits.append(hit)
            stuck.add(victim.name)
            if f.replace_s is not None:
                self.evictions.append((t + f.replace_s, hit))

    def _evict(self, fleet: Any, hit: FaultHit, t: float) -> None:
        try:
            hit.requests_retried = fleet.evict(hit.replica)
        except KeyError:  # scaled away (drained with nothing left) before the cluster replaced it: no eviction
            hit.scaled_away_at_s = t
            return
        hit.replaced_at_s = t
        if self.stage is not None:  # told only of an eviction that happened, as the drain actuator tells it
            self.stage.note_removed(f"{NAMESPACE}/{hit.replica}", t)


def _ended_at(trace: Any, end_s: float, fidelity: str) -> Any:
    """``trace`` as measured when a replay ends at ``end_s`` (``run_policy``'s ``until``): its requests that arrived
    before, its duration ``end_s``."""
    if fidelity == "fluid":
        raise ValueError("run_policy: until is for request-level replays")
    return type(trace).from_columns(trace.name, end_s, trace.columns.window(0.0, end_s))


def _measure(fleet: Any, trace: Any, cfg: BacktestConfig, fidelity: str, result: PolicyResult) -> None:
    end = trace.duration_s
    # Let requests already admitted reach their first token; no more replica-hours are counted.
    fleet.advance_to(end + 4 * cfg.slo_ttft_s)
    if fidelity == "fluid":
        result.slo_attainment = float(fleet.slo_attainment(cfg.slo_ttft_s))
        q = fleet.ttft_quantiles((0.5, 0.99))
        result.p50_ttft_s, result.p99_ttft_s = float(q[0.5]), float(q[0.99])
        result.requests = int(trace.expected_requests())
        values, weights = fleet.ttft_samples()
        ready_at = (result.times, result.ready)
        result.worst_minutes = worst_minutes(fleet.ttft_arrivals(), values, weights, cfg.slo_ttft_s, ready_at)
        return
    finished = fleet.finished()
    running = fleet.in_flight()
    # Still generating at the end: their first token came, and counts as it came.
    ttfts = [f.ttft_s for f in finished] + [ttft for _, ttft in running if ttft is not None]
    left = Counter(float(a) for a in trace.columns.arrival_s)
    left.subtract(f.arrival_s for f in finished)
    left.subtract(a for a, ttft in running if ttft is not None)
    # Never got a first token (still queued, or dropped): counted with the time they waited, outside the SLO.
    never = [a for a, n in left.items() for _ in range(max(n, 0))]
    unfinished = [end + 4 * cfg.slo_ttft_s - a for a in never]
    att, p50, p99, n = ttft_stats(ttfts, unfinished, cfg.slo_ttft_s)
    result.slo_attainment, result.p50_ttft_s, result.p99_ttft_s, result.requests = att, p50, p99, n
    arrived = [f.arrival_s for f in finished] + [a for a, t in running if t is not None]
    result.worst_minutes = worst_minutes(
        np.asarray(arrived + never, dtype=np.float64),
        np.asarray(ttfts + [math.inf] * len(never), dtype=np.float64),
        np.ones(len(arrived) + len(never)),
        cfg.slo_ttft_s,
        (result.times, result.ready),
    )


def _surge(
    stage: RolloutStage,
    policy: Kvpilot,
    snap: Any,
    want: int,
    ready: int,
    now: float,
    scale_read: ScaleRead | None = None,
) -> int:
    """kvpilot's count after the control loop's rollout stage, reading the policy's own FleetState (what kvpilot
    scraped) and the replicas asked for (loading included), as `kvpilot run` does without Kubernetes; with
    ``scale_read``, also the Deployments' status and the count as that scale source reads them."""
    asked = sum(1 for r in snap.replicas if r.state != "draining")
    deployments: Mapping[str, DeploymentRollout] | None = None
    if scale_read is not None:
        deployments, read = scale_read(snap, now)
        asked = asked if read is None else read
    planned = Decision(DEPLOYMENT, now, asked, ready, want, 0, "planned", "")
    (raised,) = stage.apply(policy.state, [planned], now, planner=policy.planner, deployments=deployments)
    policy.own_raise.note([planned], [raised], now)  # the planner's next count leaves it out, as the loop's does
    return raised.desired_replicas


def _measure_rollout(fleet: Any, trace: Any, cfg: BacktestConfig, window: RolloutWindow) -> None:
    """TTFT over the requests arriving within the rollout window (``_measure`` has run: the fleet is at the end)."""
    measure_window(window, fleet, trace, now=trace.duration_s + 4 * cfg.slo_ttft_s, slo_s=cfg.slo_ttft_s)


def measure_window(window: RolloutWindow, fleet: Any, trace: Any, *, now: float, slo_s: float) -> None:
    """TTFT of the requests that arrived in ``[start_s, end_s)``, as the fleet stands at ``now``: the trace's, and
    injected ones that were served; a trace request without a first token counts with its wait, outside the SLO.
    The backtest's rollout window and `kvpilot demo`'s (``kvpilot.demo.rollout``) are measured by this."""

    def inside(a: float) -> bool:
        return window.start_s <= a < window.end_s

    finished = [f for f in fleet.finished() if inside(f.arrival_s)]
    running = [(a, ttft) for a, ttft in fleet.in_flight() if ttft is not None and inside(a)]
    ttfts = [f.ttft_s for f in finished] + [ttft for _, ttft in running]
    left = Counter(float(a) for a in trace.columns.arrival_s if inside(float(a)))
    left.subtract(f.arrival_s for f in finished)
    left.subtract(a for a, _ in running)
    unfinished = [now - a for a, n in left.items() for _ in range(max(n, 0))]
    window.slo_attainment, _, window.p99_ttft_s, window.requests = ttft_stats(ttfts, unfinished, slo_s)


def backtest(
    path: str, cfg: BacktestConfig, progress: Progress | None = None, announce: Callable[[str], None] | None = None
) -> Report:
    """Run every configured policy over the trace at ``path`` and report them side by side, with the frontier.
    ``announce`` gets one line saying what is replayed (`replay_line`) before the first policy starts."""
    trace = sim.load_trace(
        path, rate_scale=cfg.rate_scale, seed=cfg.seed, start_s=cfg.start_s, duration_s=cfg.duration_s
    )
    if not trace.expected_requests() > 0:
        # --rate-scale 1e-300 (or a window with no arrival) replayed nothing and reported every policy at 100 % SLO
        # attainment, a p50 TTFT of 0 s: figures of no request, shown as a result
        raise ValueError(
            f"{getattr(trace, 'name', path)}: the replay holds no request (--start, --duration and --rate-scale keep "
            "none of the trace's); there is nothing to measure a policy on"
        )
    fidelity = choose_fidelity(trace, cfg.fidelity)
    if cfg.rollout_at_s is not None and fidelity != "request":
        raise ValueError(f"a rollout needs the request level; this trace replays at the {fidelity} level")
    if cfg.rollout_at_s is not None and cfg.rollout_at_s >= trace.duration_s:
        # as `kvpilot demo` refuses it: no rollout started, and the report left it out without a word (exit 0)
        raise ValueError(
            f"{getattr(trace, 'name', path)}: a rollout at {cfg.rollout_at_s:g} s is not within the replay "
            f"({float(trace.duration_s):g} s); no rollout would start"
        )
    if cfg.faults:
        resolved = replica_faults.resolve(cfg.faults, trace, cold_start_s=cfg.cold_start_s, warmup_s=WARMUP_S)
        cfg = dataclasses.replace(cfg, faults=tuple(resolved))
    ctx = context_for(trace, cfg)
    planner = ctx.planner
    assert planner is not None  # context_for always builds kvpilot's
    report = Report(getattr(trace, "name", path), fidelity, float(trace.duration_s), ctx.capacity_rps)
    report.requests = round(trace.expected_requests())
    if announce is not None:
        announce(replay_line(report, cfg))
    report.kvpilot_config = planner.to_json()
    report.arrivals = cfg.arrivals
    if cfg.arrivals == "gateway":
        report.gateway = Kvpilot.gateway_reading(ctx)
    report.faults = list(cfg.faults)
    report.gpu_type, report.gpus_per_replica, report.price_per_gpu_hour_usd = replica_gpus(cfg)
    for name in cfg.policies:
        report.policies[name] = run_policy(trace, POLICIES[name](ctx), ctx, cfg, fidelity, progress)
    if cfg.frontier:
        seeds = {name: r.desired for name, r in report.policies.items()}
        report.frontier = measure_frontier(trace, ctx, cfg, fidelity, progress, seeds)
    report.mase_forecaster, report.horizon_s = planner.forecaster, planner.horizon_s
    report.mase = forecast_mase(ctx.future_rate, forecaster=planner.forecaster, horizon_s=planner.horizon_s)
    return report


def replay_line(report: Report, cfg: BacktestConfig) -> str:
    """What the replay holds, said before minutes of it: a trace in the wrong unit (a BurstGPT `Timestamp` in
    milliseconds replays ten minutes as a week at a thousandth of the rate) or a `--duration` past the trace's end
    (replayed up to the end, without a word) shows here, not in the table at the end."""
    span = report.duration_s
    line = (
        f"{report.trace}: {report.requests:,} request{'' if report.requests == 1 else 's'} over {span:,.0f} s "
        f"({span / 3600:.2f} h, "
        f"{report.requests / span if span > 0 else 0.0:.3g} req/s on average"
        f"{'' if cfg.rate_scale == 1.0 else f' at --rate-scale {cfg.rate_scale:g}'}), {report.fidelity} level"
    )
    if cfg.duration_s is not None and span < cfg.duration_s - 1e-6:
        line += f"; --duration {cfg.duration_s:g} s runs past the trace's end: {span:,.0f} s replayed"
    return line


class _Scheduled(Policy):
    """Replays a frontier schedule (replicas held per window of ``window_s``) through the same loop and measure as
    every policy."""

    name = "frontier"

    def __init__(self, ctx: Context, held: list[int], window_s: float = WINDOW_S) -> None:
        super().__init__(ctx)
        self.held, self.interval_s = held, window_s

    def decide(self, history: History, now: float) -> int:
        w = min(int(now // self.interval_s), len(self.held) - 1)
        return self.held[w]


def measure_frontier(
    trace: Any,
    ctx: Context,
    cfg: BacktestConfig,
    fidelity: str,
    progress: Progress | None = None,
    seeds: Mapping[str, list[int]] | None = None,
) -> Frontier:
    """The frontier, seeded by ``seeds`` (policy → its ``PolicyResult.desired``, the count it held per tick)."""
    start = initial_replicas(ctx)
    tick = FLUID_TICK_S if fidelity == "fluid" else TICK_S

    def make_fleet(replicas: int) -> Any:
        return sim.make_fleet(
            trace, replicas=replicas, cold_start_s=cfg.cold_start_s, fidelity=fidelity, seed=cfg.seed, routing=ROUTING
        )

    def replay(held: list[int], window_s: float = WINDOW_S) -> tuple[float, float]:
        r = run_policy(trace, _Scheduled(ctx, held, window_s), ctx, cfg, fidelity)
        return r.slo_attainment, r.replica_hours

    return find_frontier(
        trace,
        make_fleet,
        replay,
        initial=start,
        slo_s=cfg.slo_ttft_s,
        fidelity=fidelity,
        min_replicas=cfg.min_replicas,
        max_replicas=cfg.max_replicas,
        cold_start_s=cfg.cold_start_s,
        tick_s=tick,
        warmup_s=WARMUP_S,
        progress=None if progress is None else (lambda done: progress("frontier", done)),
        seeds=seeds,
        replay_per_tick=lambda held: replay(held, tick),
        # the need-ahead seeds read each request's arrival: the request level only
        arrivals_s=trace.columns.arrival_s if fidelity == "request" else None,
        replica_rps=ctx.capacity_rps / PLANNED_UTILISATION,
    )
