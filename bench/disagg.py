"""Disaggregated replays: kvpilot per pool vs Dynamo's SLA planner rule, on a prefill pool of H100s handing KV to a
decode pool of H200s, against a co-located fleet of H100s scaled by kvpilot (BENCHMARKS.md, "Disaggregated pools").

    .venv/bin/python bench/disagg.py                    # Mooncake (long prompts) and Azure code x4
    .venv/bin/python bench/disagg.py --trace mooncake --json
    .venv/bin/python bench/disagg.py --trace conv10 --only kvpilot --no-colocated --no-frontier   # kvpilot alone

Every policy is scored as `kvpilot backtest` scores: the share of arrived requests whose first token came within
the TTFT SLO (2 s; never-served requests count as misses), and dollars = replica-hours x GPUs x the GPU type's
price (scaler.cost.DEFAULT_GPU_PRICES). The co-located fleet is `kvpilot backtest`'s own kvpilot run.

Dynamo's SLA planner rule (ai-dynamo/dynamo, components/planner/src/dynamo/planner/utils/planner_core.py,
`_compute_replica_requirements`; defaults from components/planner/src/dynamo/planner/defaults.py @
fa6702c831ef34f9b9169bce262b90567fb73432, SLAPlannerDefaults: adjustment_interval 180 s, ttft 0.5 s, itl 0.05 s,
min_endpoint 1): every adjustment interval, prefill = ceil(num_req x ISL / interval / prefill throughput per GPU),
decode = ceil(num_req x OSL / interval / decode throughput per GPU at the ITL target and context ISL + OSL/2).
Its load predictor is its default, ARIMA, on request count, ISL and OSL per interval (`load_predictor = "arima"`,
components/src/dynamo/planner/config/defaults.py @ 1ca601557ebf7cf963a3c0a1bcbae45fd2166944; fitted as
predictors.py @ 260b6ae9412cea46626b25b11407fbebd30e5cb0 fits it: scaler.backtest.policies.dynamo_sla's
ArimaLoadPredictor, reused); `--dynamo-predictor constant` gives the last interval instead. Its throughput per GPU
comes from the same calibrated profiles kvpilot reads (Dynamo's comes from its own profiling run).

The two-pool frontier (scaler/backtest/pool_frontier.py) is searched under this bench's fleet, cold starts and loop;
each pooled policy's frontier_ratio is its dollars over the frontier's at its own attainment.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState
from scaler.backtest.policies.dynamo_sla import ArimaLoadPredictor
from scaler.backtest.pool_frontier import PoolFrontier, PoolRun, pool_frontier
from scaler.backtest.result import ttft_stats
from scaler.backtest.run import BacktestConfig, backtest
from scaler.backtest.sim import render_page, serving_profile_fields
from scaler.capacity import ServingProfile
from scaler.cost import DEFAULT_GPU_PRICES
from scaler.planner import Planner
from scaler.policy import HEADROOMS, PolicyConfig
from scaler.pools import PoolConfig, PooledPlanner, PoolsConfig, sequences_within_itl
from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.profile import PROFILES
from simulator.trace import load_trace

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
CASES = {
    "mooncake": ("mooncake_synthetic_trace.jsonl", 1.0),
    "code4": ("azure2023_code.csv", 4.0),
    "conv10": ("azure2023_conv.csv", 10.0),  # not in the default run: a check that a change generalises
    # Held out from tuning (BENCHMARKS.md, "Disaggregated pools", rerun 2026-12-03 night): never replayed pooled
    # before a change to the pool planner was measured on them.
    "code2": ("azure2023_code.csv", 2.0),
    "conv4": ("azure2023_conv.csv", 4.0),
}
DEFAULT_CASES = ("mooncake", "code4")
SLO_TTFT_S = 2.0
TICK_S = 5.0
PREFILL = PROFILES["llama3-8b-h100"]
DECODE_GPUS = {"H200": PROFILES["llama3-8b-h200"], "A100": PROFILES["llama3-8b-a100"]}
DECODE_GPU = "H200"  # --decode-gpu changes it
DECODE = DECODE_GPUS[DECODE_GPU]
PREFILL_COLD_S, DECODE_COLD_S = 120.0, 120.0  # the same cold start as the co-located backtest's
MAX_REPLICAS = 64
WINDOW_S = 60.0  # the frontier's schedule step (scaler.backtest.frontier.WINDOW_S)
# Dynamo SLAPlannerDefaults (see the module docstring)
DYNAMO_INTERVAL_S, DYNAMO_TTFT_S, DYNAMO_ITL_S, DYNAMO_MIN = 180.0, 0.5, 0.05, 1


@dataclass
class Run:
    name: str
    slo_attainment: float = 0.0
    p99_ttft_s: float = 0.0
    replica_hours: dict[str, float] = field(default_factory=dict)
    cost_usd: float = 0.0
    seconds: float = 0.0
    frontier_ratio: float | None = None  # dollars over the pool frontier's at this run's attainment


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
    name = "kvpilot per pool"

    def __init__(
        self,
        *,
        prefill_spare: bool = True,
        slo_feedback: bool = False,
        burst_floor: bool = False,
        decode_tokens: bool = False,
        prefill_headroom: str = "fixed",
        prefill_forecaster: str = "auto",
    ) -> None:
        policy = PolicyConfig(
            min_replicas=1, max_replicas=MAX_REPLICAS, queue_drain_s=SLO_TTFT_S, burst_floor=burst_floor
        )
        prefill = PoolConfig(
            _serving(PREFILL),
            cold_start_s=PREFILL_COLD_S,
            policy=replace(policy, headroom=prefill_headroom),
            forecaster=prefill_forecaster,
        )
        self.planner = PooledPlanner(
            Planner(),
            PoolsConfig(
                prefill=prefill,
                decode=PoolConfig(_serving(DECODE), cold_start_s=DECODE_COLD_S, policy=policy),
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
    name = "Dynamo SLA rule"

    def __init__(self, predictor: str = "arima") -> None:
        self.next_t = DYNAMO_INTERVAL_S
        self.last: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # arrivals, prompt, output, finished
        self.p, self.d = _serving(PREFILL), _serving(DECODE)
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


def _serving(profile: object) -> ServingProfile:
    return ServingProfile(**serving_profile_fields(profile))  # type: ignore[arg-type]


def start_prefill(trace: object) -> int:
    """Prefill replicas at start: sized for the first minute's prompt tokens, as kvpilot backtest sizes the
    co-located fleet for its first minute's requests (initial_replicas)."""
    cols = trace.columns  # type: ignore[attr-defined]
    first = float(cols.prompt_tokens[cols.arrival_s < 60.0].sum()) / 60.0
    return max(1, math.ceil(first / (_serving(PREFILL).prefill_tokens_per_s * 0.8)))


def busiest_prefill(trace: object) -> int:
    """Prefill replicas for the trace's busiest minute of prompt tokens at full throughput (the oracle's ample
    prefill while it finds decode's ample constant)."""
    cols = trace.columns  # type: ignore[attr-defined]
    minutes = np.bincount((cols.arrival_s // 60.0).astype(int), weights=cols.prompt_tokens.astype(float))
    return max(
        1, min(MAX_REPLICAS, math.ceil(float(minutes.max(initial=0.0)) / 60.0 / _serving(PREFILL).prefill_tokens_per_s))
    )


def make_fleet(trace: object, prefill: int, decode: int) -> DisaggregatedFleet:
    cfg = DisaggConfig(
        prefill=FleetConfig(profile=PREFILL, replicas=prefill, cold_start_s=PREFILL_COLD_S, routing="least_loaded"),
        decode=FleetConfig(profile=DECODE, replicas=decode, cold_start_s=DECODE_COLD_S, routing="least_loaded"),
    )
    return DisaggregatedFleet(cfg, trace)  # type: ignore[arg-type]


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


def run_disaggregated(trace: object, policy: KvpilotPools | DynamoRule | Scheduled) -> Run:
    started = time.perf_counter()
    fleet = make_fleet(trace, start_prefill(trace), 1)
    duration = float(trace.duration_s)  # type: ignore[attr-defined]
    seconds = {"prefill": 0.0, "decode": 0.0}
    steps = math.ceil(duration / TICK_S)
    for i in range(1, steps + 1):
        t = min(i * TICK_S, duration)
        prev = fleet.time
        fleet.advance_to(t)
        seconds["prefill"] += len(fleet.prefill.replicas) * (t - prev)
        seconds["decode"] += len(fleet.decode.replicas) * (t - prev)
        if t >= 60.0:  # every rate window full before anyone decides, as in kvpilot backtest
            want = policy.decide(fleet, t)
            if want is not None:
                fleet.set_replicas(prefill=want[0], decode=want[1])
    end = duration + 4 * SLO_TTFT_S
    fleet.advance_to(end)
    finished, running = fleet.finished(), fleet.in_flight()
    ttfts = [f.ttft_s for f in finished] + [x for _, x in running if x is not None]
    left = Counter(float(a) for a in trace.columns.arrival_s)  # type: ignore[attr-defined]
    left.subtract(f.arrival_s for f in finished)
    left.subtract(a for a, x in running if x is not None)
    unfinished = [end - a for a, n in left.items() for _ in range(max(n, 0))]
    att, _p50, p99, _n = ttft_stats(ttfts, unfinished, SLO_TTFT_S)
    hours = {k: v / 3600.0 for k, v in seconds.items()}
    cost = hours["prefill"] * DEFAULT_GPU_PRICES["H100"].price_per_hour_usd
    cost += hours["decode"] * DEFAULT_GPU_PRICES[DECODE_GPU].price_per_hour_usd
    return Run(policy.name, att, p99, hours, cost, time.perf_counter() - started)


def replay_schedule(trace: object, prefill: Sequence[int], decode: Sequence[int]) -> PoolRun:
    """A pair of schedules replayed through the policies' loop and measure."""
    run = run_disaggregated(trace, Scheduled(prefill, decode))
    held = {"prefill": tuple(prefill), "decode": tuple(decode)}
    # Every whole replay on stderr as it ends, so a search stopped part way still shows what it replayed.
    print(
        f"    replayed: SLO {run.slo_attainment:7.2%}  ${run.cost_usd:7.2f}  replica-h prefill "
        f"{run.replica_hours['prefill']:.2f} (max {max(prefill)}), decode {run.replica_hours['decode']:.2f} "
        f"(max {max(decode)})  [{run.seconds:.0f} s]",
        file=sys.stderr,
        flush=True,
    )
    return PoolRun(held, run.slo_attainment, run.cost_usd, dict(run.replica_hours))


def measure_frontier(trace: object, most_prices: int = 3) -> PoolFrontier:
    """The two-pool frontier (scaler/backtest/pool_frontier.py) under this bench's fleet, cold starts and loop."""
    return pool_frontier(
        trace,
        lambda p, d: make_fleet(trace, p, d),
        lambda p, d: replay_schedule(trace, p, d),
        initial=(start_prefill(trace), 1),
        slo_s=SLO_TTFT_S,
        cold_start_s=(PREFILL_COLD_S, DECODE_COLD_S),
        bounds=((1, MAX_REPLICAS), (1, MAX_REPLICAS)),
        busiest=busiest_prefill(trace),
        tick_s=TICK_S,
        warmup_s=60.0,
        most_prices=most_prices,
        progress=lambda what: print(f"    frontier: {what}", file=sys.stderr, flush=True),
    )


def run_colocated(path: Path, rate_scale: float) -> Run:
    started = time.perf_counter()
    cfg = BacktestConfig(
        policies=("kvpilot",), frontier=False, rate_scale=rate_scale, slo_ttft_s=SLO_TTFT_S, fidelity="request"
    )
    result = backtest(str(path), cfg).policies["kvpilot"]
    cost = result.replica_hours * DEFAULT_GPU_PRICES["H100"].price_per_hour_usd
    hours = {"both": result.replica_hours}
    return Run(
        "co-located kvpilot (H100)",
        result.slo_attainment,
        result.p99_ttft_s,
        hours,
        cost,
        time.perf_counter() - started,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", choices=sorted(CASES), action="append")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--decode-gpu", choices=sorted(DECODE_GPUS), default="H200", help="the decode pool's GPU type")
    ap.add_argument("--no-frontier", action="store_true", help="skip the two-pool frontier search (the costliest part)")
    ap.add_argument(
        "--frontier-prices", type=int, default=3, help="Lagrangian descents per pool search (0: seeds only)"
    )
    ap.add_argument("--no-colocated", action="store_true", help="skip the co-located backtest")
    ap.add_argument("--dynamo-predictor", choices=("arima", "constant"), default="arima")
    ap.add_argument("--only", choices=("kvpilot", "dynamo"), help="run one pooled policy, not both")
    ap.add_argument(
        "--no-prefill-spare", action="store_true", help="kvpilot without PoolsConfig.prefill_spare (as before it)"
    )
    ap.add_argument("--prefill-slo-feedback", action="store_true", help="kvpilot with PoolsConfig.slo_feedback")
    ap.add_argument("--burst-floor", action="store_true", help="kvpilot with the policy's burst floor (prefill)")
    ap.add_argument(
        "--decode-tokens",
        action="store_true",
        help="kvpilot with PoolsConfig.decode_tokens (decode in output tokens/s)",
    )
    ap.add_argument("--prefill-headroom", choices=HEADROOMS, default="fixed", help="the prefill pool's policy headroom")
    ap.add_argument("--prefill-forecaster", default="auto", help="the prefill pool's forecaster (scaler.forecast)")
    args = ap.parse_args()
    global DECODE, DECODE_GPU
    DECODE, DECODE_GPU = DECODE_GPUS[args.decode_gpu], args.decode_gpu
    out: dict[str, dict[str, object]] = {}
    for case in args.trace or DEFAULT_CASES:
        file, scale = CASES[case]
        trace = load_trace(TRACES / file, rate_scale=scale)
        runs = [] if args.no_colocated else [run_colocated(TRACES / file, scale)]
        if args.only in (None, "kvpilot"):
            pools = KvpilotPools(
                prefill_spare=not args.no_prefill_spare,
                slo_feedback=args.prefill_slo_feedback,
                burst_floor=args.burst_floor,
                decode_tokens=args.decode_tokens,
                prefill_headroom=args.prefill_headroom,
                prefill_forecaster=args.prefill_forecaster,
            )
            runs.append(run_disaggregated(trace, pools))
        if args.only in (None, "dynamo"):
            runs.append(run_disaggregated(trace, DynamoRule(args.dynamo_predictor)))
        for r in runs:  # before the frontier's long search, in case it is stopped
            print(f"  {r.name}: {json.dumps(r.__dict__)}", file=sys.stderr, flush=True)
        front, started = None, time.perf_counter()
        if not args.no_frontier:
            front = measure_frontier(trace, args.frontier_prices)
            for r in runs:
                if "both" not in r.replica_hours:  # the pools' frontier bounds the pooled fleets only
                    r.frontier_ratio = front.ratio(r.slo_attainment, r.cost_usd)
        out[case] = {
            "runs": [r.__dict__ for r in runs],
            "frontier": None if front is None else [p.to_json() for p in front.runs],
        }
        if not args.json:
            base = runs[0].cost_usd
            print(f"{case}: {len(trace.columns)} requests over {trace.duration_s:.0f} s")
            for r in runs:
                hours = ", ".join(f"{k} {v:.2f}" for k, v in r.replica_hours.items())
                vs = r.cost_usd / base - 1
                ratio = "" if r.frontier_ratio is None else f"  frontier ratio ($) {r.frontier_ratio:.3f}"
                print(
                    f"  {r.name:28s} SLO {r.slo_attainment:7.2%}  p99 TTFT {r.p99_ttft_s:6.2f} s  ${r.cost_usd:7.2f} "
                    f"({vs:+.0%} vs first)  replica-h {hours}{ratio}  [{r.seconds:.0f} s]"
                )
            if front is not None:
                print(f"  pool frontier ({time.perf_counter() - started:.0f} s), in dollars:")
                for p in front.runs:
                    hours = ", ".join(f"{k} {v:.2f}" for k, v in p.replica_hours.items())
                    print(f"    SLO {p.slo_attainment:7.2%}  ${p.cost_usd:7.2f}  replica-h {hours}")
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
