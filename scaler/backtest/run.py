"""Replay one trace under each policy, in virtual time, on identical simulated fleets.

Every policy gets the same trace, replica profile, cold start, routing, seed, starting fleet (sized for the
first minute's demand, as a fleet that was already running) and the same profiled capacity. The loop ticks
every 5 s: advance the simulator, observe, and on each policy's own interval ask it for a replica count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scaler.backtest import sim
from scaler.backtest.mase import forecast_mase
from scaler.backtest.observe import FleetCounters, History, from_snapshot
from scaler.backtest.policies import POLICIES, Context, Policy
from scaler.backtest.policies.kvpilot import Kvpilot, planner_config
from scaler.backtest.profiling import replica_capacity_rps
from scaler.backtest.result import PolicyResult, ttft_stats

TICK_S = 5.0
# The fluid level replays days: a 30 s tick keeps a 10-day trace within minutes per policy. Every policy's
# interval is then a multiple of 30 s (reactive's 15 s polling and KPA's 5 s refresh included), for all alike.
FLUID_TICK_S = 30.0
ORACLE_BIN_S = 10.0
WARMUP_S = 60.0
PROFILE_SAMPLE_S = 600.0
REQUEST_LEVEL_MAX_REQUESTS = 300_000
REQUEST_LEVEL_MAX_S = 12 * 3600.0
ROUTING = "least_loaded"

Progress = Callable[[str, float], None]  # (policy, share of its replay done)


@dataclass(frozen=True)
class BacktestConfig:
    cold_start_s: float = 120.0
    slo_ttft_s: float = 2.0
    policies: tuple[str, ...] = ("reactive", "kvpilot", "oracle")
    fidelity: str | None = None  # None: request level unless the trace is too long or too large
    min_replicas: int = 1
    max_replicas: int | None = None
    seed: int = 0
    rate_scale: float = 1.0
    capacity_rps: float | None = None  # None: profile it on the simulator
    start_s: float | None = None  # replay only part of the trace
    duration_s: float | None = None

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {', '.join(unknown)}; known: {', '.join(POLICIES)}")
        if not self.policies:
            raise ValueError("no policies to backtest")
        if self.fidelity not in (None, "request", "fluid"):
            raise ValueError(f"fidelity must be 'request' or 'fluid', got {self.fidelity!r}")
        if self.cold_start_s < 0 or self.slo_ttft_s <= 0:
            raise ValueError("cold_start_s must be >= 0 and slo_ttft_s > 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")


@dataclass
class Report:
    trace: str
    fidelity: str
    duration_s: float
    capacity_rps: float
    policies: dict[str, PolicyResult] = field(default_factory=dict)
    mase: float = math.nan
    mase_forecaster: str = ""
    horizon_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Exactly the contract: {"policies": {name: {five numbers}}, "forecast": {"mase": x}}."""
        mase = round(self.mase, 4) if math.isfinite(self.mase) else None
        return {"policies": {n: r.summary() for n, r in self.policies.items()}, "forecast": {"mase": mase}}


def choose_fidelity(trace: Any, requested: str | None) -> str:
    if requested:
        return requested
    big = trace.expected_requests() > REQUEST_LEVEL_MAX_REQUESTS or trace.duration_s > REQUEST_LEVEL_MAX_S
    return "fluid" if big else "request"


def build_context(trace: Any, cfg: BacktestConfig, capacity_rps: float, idle_attainment: float = 1.0) -> Context:
    rs = trace.rate_series(ORACLE_BIN_S)
    rates = [float(x) for x in rs.req_per_s]
    weights = [r for r in rates if r > 0] or [1.0]
    used = [(r, p, o) for r, p, o in zip(rates, rs.mean_prompt_tokens, rs.mean_output_tokens, strict=True) if r > 0]
    total = sum(weights)
    prompt = sum(r * float(p) for r, p, _ in used) / total if used else 1.0
    output = sum(r * float(o) for r, _, o in used) / total if used else 1.0
    return Context(
        cold_start_s=cfg.cold_start_s,
        slo_ttft_s=cfg.slo_ttft_s,
        capacity_rps=capacity_rps,
        mean_prompt_tokens=prompt if math.isfinite(prompt) else 1.0,
        mean_output_tokens=output if math.isfinite(output) else 1.0,
        min_replicas=cfg.min_replicas,
        max_replicas=cfg.max_replicas,
        future_rate=(tuple(float(t) for t in rs.times_s), tuple(rates)),
        bin_s=ORACLE_BIN_S,
        idle_attainment=idle_attainment,
    )


def initial_replicas(ctx: Context) -> int:
    first = [r for t, r in zip(*ctx.future_rate, strict=True) if t < 60.0] or [0.0]
    return ctx.clamp(math.ceil(max(first) / ctx.capacity_rps - 1e-9))


def run_policy(
    trace: Any, policy: Policy, ctx: Context, cfg: BacktestConfig, fidelity: str, progress: Progress | None = None
) -> PolicyResult:
    start = initial_replicas(ctx)
    fleet = sim.make_fleet(
        trace, replicas=start, cold_start_s=cfg.cold_start_s, fidelity=fidelity, seed=cfg.seed, routing=ROUTING
    )
    history, counters = History(max_s=3600.0), FleetCounters()
    result = PolicyResult(policy.name, 0.0, 0.0, 0.0, 0.0, 0, 0)
    policy.start(start, 0.0)
    # Nobody decides before the first full minute: every rate window a policy reads must be complete.
    desired, next_decision, replica_s = start, WARMUP_S, 0.0
    tick = FLUID_TICK_S if fidelity == "fluid" else TICK_S
    steps = max(1, math.ceil(trace.duration_s / tick))
    for i in range(steps + 1):
        t = min(i * tick, trace.duration_s)
        fleet.advance_to(t)
        snap = fleet.snapshot()
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
            if want != desired:
                result.scale_events += 1
                desired = want
            fleet.set_replicas(desired)
            next_decision = t + policy.interval_s
        if progress is not None and i % 50 == 0:
            progress(policy.name, i / steps)
    result.replica_hours = replica_s / 3600.0
    _measure(fleet, trace, cfg, fidelity, result)
    result.forecasts = policy.forecasts
    if progress is not None:
        progress(policy.name, 1.0)
    return result


def _measure(fleet: Any, trace: Any, cfg: BacktestConfig, fidelity: str, result: PolicyResult) -> None:
    end = trace.duration_s
    # Let requests already admitted reach their first token; no more replica-hours are counted.
    fleet.advance_to(end + 4 * cfg.slo_ttft_s)
    if fidelity == "fluid":
        result.slo_attainment = float(fleet.slo_attainment(cfg.slo_ttft_s))
        q = fleet.ttft_quantiles((0.5, 0.99))
        result.p50_ttft_s, result.p99_ttft_s = float(q[0.5]), float(q[0.99])
        result.requests = int(trace.expected_requests())
        return
    finished = fleet.finished()
    ttfts = [f.ttft_s for f in finished]
    left = Counter(float(a) for a in trace.columns.arrival_s)
    left.subtract(f.arrival_s for f in finished)
    # Never got a first token (still queued, or dropped): counted with the time they waited, outside the SLO.
    unfinished = [end + 4 * cfg.slo_ttft_s - a for a, n in left.items() for _ in range(max(n, 0))]
    att, p50, p99, n = ttft_stats(ttfts, unfinished, cfg.slo_ttft_s)
    result.slo_attainment, result.p50_ttft_s, result.p99_ttft_s, result.requests = att, p50, p99, n


def backtest(path: str, cfg: BacktestConfig, progress: Progress | None = None) -> Report:
    """Run every configured policy over the trace at ``path`` and report them side by side."""
    trace = sim.load_trace(
        path, rate_scale=cfg.rate_scale, seed=cfg.seed, start_s=cfg.start_s, duration_s=cfg.duration_s
    )
    fidelity = choose_fidelity(trace, cfg.fidelity)
    if cfg.capacity_rps:
        capacity, idle = cfg.capacity_rps, 1.0
    else:
        # Long (lazily sampled) traces lend their first ten minutes' requests to the profile.
        sample = (
            trace
            if fidelity == "request"
            else sim.load_trace(
                path, rate_scale=cfg.rate_scale, seed=cfg.seed, start_s=cfg.start_s, duration_s=PROFILE_SAMPLE_S
            )
        )
        capacity, idle = replica_capacity_rps(sample, cfg.slo_ttft_s, seed=cfg.seed)
    ctx = build_context(trace, cfg, capacity, idle)
    report = Report(getattr(trace, "name", path), fidelity, float(trace.duration_s), capacity)
    for name in cfg.policies:
        report.policies[name] = run_policy(trace, POLICIES[name](ctx), ctx, cfg, fidelity, progress)
    pc = planner_config(ctx)
    report.mase_forecaster, report.horizon_s = pc.forecaster, pc.horizon_s
    report.mase = forecast_mase(ctx.future_rate, forecaster=pc.forecaster, horizon_s=pc.horizon_s)
    return report
