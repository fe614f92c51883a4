"""Disaggregated replays: kvpilot per pool and Dynamo's SLA planner rule scaling a prefill pool that hands KV to a
decode pool (`simulator.disagg`), each pool on its own GPU type, scored in SLO attainment and dollars; the
co-located kvpilot run and the two-pool frontier to set them against. `kvpilot backtest --pools` and
bench/disagg.py run these.

Every policy is scored as `kvpilot backtest` scores: the share of arrived requests whose first token came within
the TTFT SLO (2 s; never-served requests count as misses), and dollars = replica-hours x the pool's GPU type's
price per hour (`scaler.cost.DEFAULT_GPU_PRICES` unless given). The co-located fleet is `kvpilot backtest`'s own
kvpilot run.

Dynamo's SLA planner rule (ai-dynamo/dynamo, components/planner/src/dynamo/planner/utils/planner_core.py,
`_compute_replica_requirements`; defaults from components/planner/src/dynamo/planner/defaults.py @
fa6702c831ef34f9b9169bce262b90567fb73432, SLAPlannerDefaults: adjustment_interval 180 s, ttft 0.5 s, itl 0.05 s,
min_endpoint 1): every adjustment interval, prefill = ceil(num_req x ISL / interval / prefill throughput per GPU),
decode = ceil(num_req x OSL / interval / decode throughput per GPU at the ITL target and context ISL + OSL/2).
Its load predictor is its default, ARIMA, on request count, ISL and OSL per interval (`load_predictor = "arima"`,
components/src/dynamo/planner/config/defaults.py @ 1ca601557ebf7cf963a3c0a1bcbae45fd2166944; fitted as
predictors.py @ 260b6ae9412cea46626b25b11407fbebd30e5cb0 fits it: scaler.backtest.policies.dynamo_sla's
ArimaLoadPredictor, reused); the predictor "constant" gives the last interval instead. Its throughput per GPU
comes from the same calibrated profiles kvpilot reads (Dynamo's comes from its own profiling run).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState
from scaler.backtest.policies.dynamo_sla import ArimaLoadPredictor
from scaler.backtest.pool_frontier import PoolFrontier, PoolRun, pool_frontier
from scaler.backtest.result import ttft_stats
from scaler.backtest.run import BacktestConfig, backtest
from scaler.backtest.sim import render_page, serving_profile_fields
from scaler.capacity import ServingProfile
from scaler.cost import DEFAULT_GPU_PRICES, GpuPrice
from scaler.planner import Planner
from scaler.policy import PolicyConfig
from scaler.pools import PoolConfig, PooledPlanner, PoolsConfig, sequences_within_itl
from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.profile import PROFILES

SLO_TTFT_S = 2.0
TICK_S = 5.0
# The calibrated Llama-3-8B replica of each GPU type a pool can run on (simulator/profiles).
GPU_PROFILES = {
    "H100": PROFILES["llama3-8b-h100"],
    "H200": PROFILES["llama3-8b-h200"],
    "A100": PROFILES["llama3-8b-a100"],
    "L4": PROFILES["llama3-8b-l4"],
}
PREFILL_COLD_S, DECODE_COLD_S = 120.0, 120.0  # the same cold start as the co-located backtest's
MAX_REPLICAS = 64
WINDOW_S = 60.0  # the frontier's schedule step (scaler.backtest.frontier.WINDOW_S)
WARMUP_S = 60.0  # every rate window full before anyone decides, as in kvpilot backtest
# Dynamo SLAPlannerDefaults (see the module docstring)
DYNAMO_INTERVAL_S, DYNAMO_TTFT_S, DYNAMO_ITL_S, DYNAMO_MIN = 180.0, 0.5, 0.05, 1
DYNAMO_PREDICTORS = ("arima", "constant")
COLOCATED_GPU = "H100"  # the co-located backtest's replica (the simulator's default profile)


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class PoolGpus:
    """Each pool's GPU type and what a GPU-hour of each type costs; an unknown type is refused at construction."""

    prefill: str = "H100"
    decode: str = "H200"
    prices: Mapping[str, GpuPrice] = field(default_factory=lambda: dict(DEFAULT_GPU_PRICES))

    def __post_init__(self) -> None:
        known = sorted(t for t in GPU_PROFILES if t in self.prices)
        for pool, gpu in (("prefill", self.prefill), ("decode", self.decode)):
            if gpu not in known:
                raise ValueError(
                    f"{pool} GPU type {gpu!r} unknown: one of {', '.join(known)} (a calibrated profile and a price)"
                )
        if COLOCATED_GPU not in self.prices:
            raise ValueError(f"no price for {COLOCATED_GPU}, the co-located fleet's GPU type")

    @property
    def prefill_profile(self) -> Any:
        return GPU_PROFILES[self.prefill]

    @property
    def decode_profile(self) -> Any:
        return GPU_PROFILES[self.decode]

    def price(self, gpu: str) -> float:
        return self.prices[gpu].price_per_hour_usd


@dataclass
class DisaggRun:
    """One policy's replay: attainment, p99 TTFT, replica-hours per pool (``both`` for the co-located fleet) and
    dollars; ``frontier_ratio`` is its dollars over the pool frontier's at its attainment, where searched."""

    name: str
    slo_attainment: float = 0.0
    p99_ttft_s: float = 0.0
    replica_hours: dict[str, float] = field(default_factory=dict)
    cost_usd: float = 0.0
    seconds: float = 0.0
    frontier_ratio: float | None = None


def _serving(profile: object) -> ServingProfile:
    return ServingProfile(**serving_profile_fields(profile))  # type: ignore[arg-type]


def _samples(fleet: DisaggregatedFleet, t: float) -> list[ReplicaSample]:
    """Every ready replica's /metrics page as the simulator serves it, parsed and adapted as the collector does
    (TTFT and queue-time histograms included: the prefill pool's SLO feedback reads them), each with its pool's
    role, as discovery labels it."""
    out = []
    for role, snap in fleet.snapshots().items():
        for r in snap.replicas:
            if r.state == "loading":
                continue  # discovery lists only Ready pods
            target = TargetInfo(
                url=f"http://{r.name}/metrics", engine="vllm", namespace="llm", deployment="chat", pod=r.name,
                node=r.node, role=role,
            )  # fmt: skip
            out.extend(adapt_page(render_page(r, "vllm"), target, t, engine="vllm").replicas)
    return out


class KvpilotPools:
    """kvpilot's pooled planner (`scaler.pools.PooledPlanner`) fed the fleet's pages as the collector reads them."""

    name = "kvpilot per pool"

    def __init__(
        self,
        gpus: PoolGpus | None = None,
        *,
        prefill_spare: bool = True,
        slo_feedback: bool = False,
        burst_floor: bool = False,
        decode_tokens: bool = False,
        prefill_headroom: str = "fixed",
        prefill_forecaster: str = "auto",
    ) -> None:
        gpus = gpus or PoolGpus()
        policy = PolicyConfig(
            min_replicas=1, max_replicas=MAX_REPLICAS, queue_drain_s=SLO_TTFT_S, burst_floor=burst_floor
        )
        prefill = PoolConfig(
            _serving(gpus.prefill_profile),
            cold_start_s=PREFILL_COLD_S,
            policy=replace(policy, headroom=prefill_headroom),
            forecaster=prefill_forecaster,
        )
        self.planner = PooledPlanner(
            Planner(),
            PoolsConfig(
                prefill=prefill,
                decode=PoolConfig(_serving(gpus.decode_profile), cold_start_s=DECODE_COLD_S, policy=policy),
                ttft_target_s=SLO_TTFT_S / 2,  # half the SLO for prefill's queue; the link and decode's step follow
                prefill_spare=prefill_spare,
                slo_feedback=slo_feedback,
                decode_tokens=decode_tokens,
            ),
        )
        self.state = FleetState(rate_window_s=60.0)

    def decide(self, fleet: DisaggregatedFleet, t: float) -> tuple[int, int] | None:
        self.state.observe(_samples(fleet, t), [], now=t)
        counts = {
            "llm/chat@prefill": len([r for r in fleet.prefill.replicas if not r.draining]),
            "llm/chat@decode": len([r for r in fleet.decode.replicas if not r.draining]),
        }
        want = {d.deployment: d.desired_replicas for d in self.planner.decide(self.state, t, current_replicas=counts)}
        return want.get("llm/chat@prefill"), want.get("llm/chat@decode")  # type: ignore[return-value]


class DynamoRule:
    """Dynamo's SLA planner rule (the module docstring cites it), every adjustment interval."""

    name = "Dynamo SLA rule"

    def __init__(self, predictor: str = "arima", gpus: PoolGpus | None = None) -> None:
        if predictor not in DYNAMO_PREDICTORS:
            raise ValueError(f"Dynamo predictor {predictor!r} unknown: one of {', '.join(DYNAMO_PREDICTORS)}")
        gpus = gpus or PoolGpus()
        self.next_t = DYNAMO_INTERVAL_S
        self.last: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # arrivals, prompt, output, finished
        self.p, self.d = _serving(gpus.prefill_profile), _serving(gpus.decode_profile)
        self.predictor = predictor
        # One ARIMAPredictor per series, as Dynamo's planner keeps (scaler.backtest.policies.dynamo_sla, cited there)
        self.num_req, self.isl, self.osl = (ArimaLoadPredictor(DYNAMO_INTERVAL_S) for _ in range(3))

    def _next(self, series: ArimaLoadPredictor, observed: float) -> float:
        if self.predictor == "constant":
            return observed
        return series.predict_next() if series.raw else observed

    def decide(self, fleet: DisaggregatedFleet, t: float) -> tuple[int, int] | None:
        if t + 1e-9 < self.next_t:
            return None
        self.next_t = t + DYNAMO_INTERVAL_S
        pre = fleet.snapshots()["prefill"]
        arrivals = float(pre.arrivals_total)
        prompt = float(sum(r.prompt_tokens_total for r in pre.replicas))
        finished = fleet.finished()
        output, done = float(sum(f.output_tokens for f in finished)), float(len(finished))
        a0, p0, o0, f0 = self.last
        self.last = (arrivals, prompt, output, done)
        num_req = arrivals - a0
        isl = (prompt - p0) / num_req if num_req > 0 else 0.0
        osl = (output - o0) / (done - f0) if done > f0 else (self.osl.raw[-1] if self.osl.raw else 0.0)
        self.num_req.add(num_req)
        if num_req > 0:
            self.isl.add(isl)
        if done > f0:
            self.osl.add(osl)
        num_req = self._next(self.num_req, num_req)
        isl, osl = self._next(self.isl, isl), self._next(self.osl, osl)
        if num_req <= 0 or isl <= 0:
            return DYNAMO_MIN, DYNAMO_MIN
        # prefill throughput per GPU at ISL where its TTFT (ISL / rate) meets the target; else none does
        p_thpt = self.p.prefill_tokens_per_s if isl / self.p.prefill_tokens_per_s <= DYNAMO_TTFT_S else 0.0
        prefill = DYNAMO_MIN if p_thpt <= 0 else max(DYNAMO_MIN, math.ceil(num_req * isl / DYNAMO_INTERVAL_S / p_thpt))
        n = sequences_within_itl(self.d, DYNAMO_ITL_S, isl + osl / 2)
        per_seq = (self.d.max_num_seqs / self.d.decode_tokens_per_s - self.d.decode_step_s) / self.d.max_num_seqs
        if self.d.kv_read_tokens_per_s:
            per_seq += (isl + osl / 2) / self.d.kv_read_tokens_per_s
        d_thpt = n / (self.d.decode_step_s + n * per_seq)  # tokens/s of one replica at that batch
        decode = max(DYNAMO_MIN, math.ceil(num_req * max(osl, 1.0) / DYNAMO_INTERVAL_S / d_thpt))
        return min(prefill, MAX_REPLICAS), min(decode, MAX_REPLICAS)


class Scheduled:
    """A pair of schedules (replicas held per 60 s window in each pool), set at each window's first decision."""

    name = "frontier"

    def __init__(self, prefill: Sequence[int], decode: Sequence[int]) -> None:
        self.held = (list(prefill), list(decode))
        self.window = -1

    def decide(self, fleet: DisaggregatedFleet, t: float) -> tuple[int, int] | None:
        w = min(int(t // WINDOW_S), len(self.held[0]) - 1)
        if w == self.window:
            return None
        self.window = w
        return self.held[0][w], self.held[1][w]


def start_prefill(trace: Any, gpus: PoolGpus | None = None) -> int:
    """Prefill replicas at start: sized for the first minute's prompt tokens, as kvpilot backtest sizes the
    co-located fleet for its first minute's requests (initial_replicas)."""
    cols = trace.columns
    first = float(cols.prompt_tokens[cols.arrival_s < 60.0].sum()) / 60.0
    return max(1, math.ceil(first / (_serving((gpus or PoolGpus()).prefill_profile).prefill_tokens_per_s * 0.8)))


def busiest_prefill(trace: Any, gpus: PoolGpus | None = None) -> int:
    """Prefill replicas for the trace's busiest minute of prompt tokens at full throughput (the oracle's ample
    prefill while it finds decode's ample constant)."""
    cols = trace.columns
    minutes = np.bincount((cols.arrival_s // 60.0).astype(int), weights=cols.prompt_tokens.astype(float))
    per_replica = _serving((gpus or PoolGpus()).prefill_profile).prefill_tokens_per_s
    return max(1, min(MAX_REPLICAS, math.ceil(float(minutes.max(initial=0.0)) / 60.0 / per_replica)))


def make_fleet(trace: Any, prefill: int, decode: int, gpus: PoolGpus | None = None) -> DisaggregatedFleet:
    gpus = gpus or PoolGpus()
    cfg = DisaggConfig(
        prefill=FleetConfig(
            profile=gpus.prefill_profile, replicas=prefill, cold_start_s=PREFILL_COLD_S, routing="least_loaded"
        ),
        decode=FleetConfig(
            profile=gpus.decode_profile, replicas=decode, cold_start_s=DECODE_COLD_S, routing="least_loaded"
        ),
    )
    return DisaggregatedFleet(cfg, trace)


Policy = KvpilotPools | DynamoRule | Scheduled


def run_disaggregated(trace: Any, policy: Policy, gpus: PoolGpus | None = None) -> DisaggRun:
    """``policy`` scaling both pools of a fleet replaying ``trace``, decided every TICK_S from WARMUP_S on, each
    pool paying for every replica it holds (loading and draining included)."""
    gpus = gpus or PoolGpus()
    started = time.perf_counter()
    fleet = make_fleet(trace, start_prefill(trace, gpus), 1, gpus)
    duration = float(trace.duration_s)
    seconds = {"prefill": 0.0, "decode": 0.0}
    steps = math.ceil(duration / TICK_S)
    for i in range(1, steps + 1):
        t = min(i * TICK_S, duration)
        prev = fleet.time
        fleet.advance_to(t)
        seconds["prefill"] += len(fleet.prefill.replicas) * (t - prev)
        seconds["decode"] += len(fleet.decode.replicas) * (t - prev)
        if t >= WARMUP_S:
            want = policy.decide(fleet, t)
            if want is not None:
                fleet.set_replicas(prefill=want[0], decode=want[1])
    end = duration + 4 * SLO_TTFT_S
    fleet.advance_to(end)
    finished, running = fleet.finished(), fleet.in_flight()
    ttfts = [f.ttft_s for f in finished] + [x for _, x in running if x is not None]
    left = Counter(float(a) for a in trace.columns.arrival_s)
    left.subtract(f.arrival_s for f in finished)
    left.subtract(a for a, x in running if x is not None)
    unfinished = [end - a for a, n in left.items() for _ in range(max(n, 0))]
    att, _p50, p99, _n = ttft_stats(ttfts, unfinished, SLO_TTFT_S)
    hours = {k: v / 3600.0 for k, v in seconds.items()}
    cost = hours["prefill"] * gpus.price(gpus.prefill)
    cost += hours["decode"] * gpus.price(gpus.decode)
    return DisaggRun(policy.name, att, p99, hours, cost, time.perf_counter() - started)


def replay_schedule(
    trace: Any,
    prefill: Sequence[int],
    decode: Sequence[int],
    gpus: PoolGpus | None = None,
    progress: Callable[[str], None] = _quiet,
) -> PoolRun:
    """A pair of schedules replayed through the policies' loop and measure; ``progress`` hears each as it ends."""
    run = run_disaggregated(trace, Scheduled(prefill, decode), gpus)
    held = {"prefill": tuple(prefill), "decode": tuple(decode)}
    progress(
        f"replayed: SLO {run.slo_attainment:7.2%}  ${run.cost_usd:7.2f}  replica-h prefill "
        f"{run.replica_hours['prefill']:.2f} (max {max(prefill)}), decode {run.replica_hours['decode']:.2f} "
        f"(max {max(decode)})  [{run.seconds:.0f} s]"
    )
    return PoolRun(held, run.slo_attainment, run.cost_usd, dict(run.replica_hours))


def measure_frontier(
    trace: Any, most_prices: int = 3, gpus: PoolGpus | None = None, progress: Callable[[str], None] = _quiet
) -> PoolFrontier:
    """The two-pool frontier (scaler/backtest/pool_frontier.py) under these replays' fleet, cold starts and loop;
    ``progress`` hears each replay and each stage of the search."""
    gpus = gpus or PoolGpus()
    return pool_frontier(
        trace,
        lambda p, d: make_fleet(trace, p, d, gpus),
        lambda p, d: replay_schedule(trace, p, d, gpus, progress),
        initial=(start_prefill(trace, gpus), 1),
        slo_s=SLO_TTFT_S,
        cold_start_s=(PREFILL_COLD_S, DECODE_COLD_S),
        bounds=((1, MAX_REPLICAS), (1, MAX_REPLICAS)),
        busiest=busiest_prefill(trace, gpus),
        tick_s=TICK_S,
        warmup_s=WARMUP_S,
        most_prices=most_prices,
        progress=lambda what: progress(f"frontier: {what}"),
    )


def run_colocated(
    path: str | Path,
    rate_scale: float,
    *,
    start_s: float | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    gpus: PoolGpus | None = None,
) -> DisaggRun:
    """`kvpilot backtest`'s kvpilot on a co-located fleet of H100s (its defaults, request level), priced as the
    pools are."""
    gpus = gpus or PoolGpus()
    started = time.perf_counter()
    cfg = BacktestConfig(
        policies=("kvpilot",),
        frontier=False,
        rate_scale=rate_scale,
        slo_ttft_s=SLO_TTFT_S,
        fidelity="request",
        start_s=start_s,
        duration_s=duration_s,
        seed=seed,
    )
    result = backtest(str(path), cfg).policies["kvpilot"]
    cost = result.replica_hours * gpus.price(COLOCATED_GPU)
    hours = {"both": result.replica_hours}
    return DisaggRun(
        f"co-located kvpilot ({COLOCATED_GPU})",
        result.slo_attainment,
        result.p99_ttft_s,
        hours,
        cost,
        time.perf_counter() - started,
    )
