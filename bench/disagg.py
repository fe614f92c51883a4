"""Disaggregated replays: kvpilot per pool vs Dynamo's SLA planner rule, on a prefill pool of H100s handing KV to a
decode pool of H200s, against a co-located fleet of H100s scaled by kvpilot (BENCHMARKS.md, "Disaggregated pools").

    .venv/bin/python bench/disagg.py                    # Mooncake (long prompts) and Azure code x4
    .venv/bin/python bench/disagg.py --trace mooncake --json

Every policy is scored as `kvpilot backtest` scores: the share of arrived requests whose first token came within
the TTFT SLO (2 s; never-served requests count as misses), and dollars = replica-hours x GPUs x the GPU type's
price (scaler.cost.DEFAULT_GPU_PRICES). The co-located fleet is `kvpilot backtest`'s own kvpilot run.

Dynamo's SLA planner rule (ai-dynamo/dynamo, components/planner/src/dynamo/planner/utils/planner_core.py,
`_compute_replica_requirements`; defaults from components/planner/src/dynamo/planner/defaults.py @
fa6702c831ef34f9b9169bce262b90567fb73432, SLAPlannerDefaults: adjustment_interval 180 s, ttft 0.5 s, itl 0.05 s,
min_endpoint 1): every adjustment interval, prefill = ceil(num_req x ISL / interval / prefill throughput per GPU),
decode = ceil(num_req x OSL / interval / decode throughput per GPU at the ITL target and context ISL + OSL/2).
Here its load predictor is the last interval (Dynamo's "constant"; its default is ARIMA) and its throughput per GPU
comes from the same calibrated profiles kvpilot reads (Dynamo's comes from its own profiling run).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.samples import ReplicaSample
from collector.state import FleetState
from scaler.backtest.result import ttft_stats
from scaler.backtest.run import BacktestConfig, backtest
from scaler.backtest.sim import serving_profile_fields
from scaler.capacity import ServingProfile
from scaler.cost import DEFAULT_GPU_PRICES
from scaler.planner import Planner
from scaler.policy import PolicyConfig
from scaler.pools import PoolConfig, PooledPlanner, PoolsConfig, sequences_within_itl
from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.profile import PROFILES
from simulator.trace import load_trace

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
CASES = {"mooncake": ("mooncake_synthetic_trace.jsonl", 1.0), "code4": ("azure2023_code.csv", 4.0)}
SLO_TTFT_S = 2.0
TICK_S = 5.0
PREFILL = PROFILES["llama3-8b-h100"]
DECODE_GPUS = {"H200": PROFILES["llama3-8b-h200"], "A100": PROFILES["llama3-8b-a100"]}
DECODE_GPU = "H200"  # --decode-gpu changes it
DECODE = DECODE_GPUS[DECODE_GPU]
PREFILL_COLD_S, DECODE_COLD_S = 120.0, 120.0  # the same cold start as the co-located backtest's
MAX_REPLICAS = 64
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


def _samples(fleet: DisaggregatedFleet, t: float) -> list[ReplicaSample]:
    out = []
    for role, snap in fleet.snapshots().items():
        for r in snap.replicas:
            if r.state == "loading":
                continue  # discovery lists only Ready pods
            out.append(
                ReplicaSample(
                    "llm",
                    "chat",
                    r.name,
                    r.node,
                    "vllm",
                    r.model_name,
                    t,
                    requests_waiting=float(r.requests_waiting),
                    requests_running=float(r.requests_running),
                    kv_usage=r.kv_usage,
                    kv_capacity_tokens=float(r.kv_capacity_tokens),
                    prompt_tokens=float(r.prompt_tokens_total),
                    generation_tokens=float(r.generation_tokens_total),
                    requests_finished=float(r.requests_finished_total),
                    role=role,
                )
            )
    return out


class KvpilotPools:
    name = "kvpilot per pool"

    def __init__(self) -> None:
        policy = PolicyConfig(min_replicas=1, max_replicas=MAX_REPLICAS, queue_drain_s=SLO_TTFT_S)
        self.planner = PooledPlanner(
            Planner(),
            PoolsConfig(
                prefill=PoolConfig(_serving(PREFILL), cold_start_s=PREFILL_COLD_S, policy=policy),
                decode=PoolConfig(_serving(DECODE), cold_start_s=DECODE_COLD_S, policy=policy),
                ttft_target_s=SLO_TTFT_S / 2,  # half the SLO for prefill's queue; the link and decode's step follow
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

    def __init__(self) -> None:
        self.next_t = DYNAMO_INTERVAL_S
        self.last: tuple[float, float, float] = (0.0, 0.0, 0.0)  # arrivals, prompt tokens, output tokens (totals)
        self.p, self.d = _serving(PREFILL), _serving(DECODE)

    def decide(self, fleet: DisaggregatedFleet, t: float) -> tuple[int, int] | None:
        if t + 1e-9 < self.next_t:
            return None
        self.next_t = t + DYNAMO_INTERVAL_S
        pre = fleet.snapshots()["prefill"]
        arrivals = float(pre.arrivals_total)
        prompt = float(sum(r.prompt_tokens_total for r in pre.replicas))
        output = float(sum(f.output_tokens for f in fleet.finished()))
        done = max(len(fleet.finished()), 1)
        num_req = arrivals - self.last[0]
        isl = (prompt - self.last[1]) / max(num_req, 1.0)
        osl = output / done
        self.last = (arrivals, prompt, output)
        if num_req <= 0:
            return DYNAMO_MIN, DYNAMO_MIN
        # prefill throughput per GPU at ISL where its TTFT (ISL / rate) meets the target; else none does
        p_thpt = self.p.prefill_tokens_per_s if isl / self.p.prefill_tokens_per_s <= DYNAMO_TTFT_S else 0.0
        prefill = DYNAMO_MIN if p_thpt <= 0 else max(DYNAMO_MIN, math.ceil(num_req * isl / DYNAMO_INTERVAL_S / p_thpt))
        n = sequences_within_itl(self.d, DYNAMO_ITL_S, isl + osl / 2)
        per_seq = (self.d.max_num_seqs / self.d.decode_tokens_per_s - self.d.decode_step_s) / self.d.max_num_seqs
        if self.d.kv_read_tokens_per_s:
            per_seq += (isl + osl / 2) / self.d.kv_read_tokens_per_s
        d_thpt = n / (self.d.decode_step_s + n * per_seq)  # tokens/s of one replica at that batch
        decode = max(DYNAMO_MIN, math.ceil(num_req * osl / DYNAMO_INTERVAL_S / d_thpt))
        return min(prefill, MAX_REPLICAS), min(decode, MAX_REPLICAS)


def _serving(profile: object) -> ServingProfile:
    return ServingProfile(**serving_profile_fields(profile))  # type: ignore[arg-type]


def run_disaggregated(trace: object, policy: KvpilotPools | DynamoRule) -> Run:
    started = time.perf_counter()
    # Sized for the first minute's prompt tokens at start, as kvpilot backtest sizes the co-located fleet for its
    # first minute's requests (initial_replicas).
    cols = trace.columns  # type: ignore[attr-defined]
    first = float(cols.prompt_tokens[cols.arrival_s < 60.0].sum()) / 60.0
    start = max(1, math.ceil(first / (_serving(PREFILL).prefill_tokens_per_s * 0.8)))
    cfg = DisaggConfig(
        prefill=FleetConfig(profile=PREFILL, replicas=start, cold_start_s=PREFILL_COLD_S, routing="least_loaded"),
        decode=FleetConfig(profile=DECODE, replicas=1, cold_start_s=DECODE_COLD_S, routing="least_loaded"),
    )
    fleet = DisaggregatedFleet(cfg, trace)  # type: ignore[arg-type]
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
    args = ap.parse_args()
    global DECODE, DECODE_GPU
    DECODE, DECODE_GPU = DECODE_GPUS[args.decode_gpu], args.decode_gpu
    out: dict[str, list[dict[str, object]]] = {}
    for case in args.trace or list(CASES):
        file, scale = CASES[case]
        trace = load_trace(TRACES / file, rate_scale=scale)
        runs = [
            run_colocated(TRACES / file, scale),
            run_disaggregated(trace, KvpilotPools()),
            run_disaggregated(trace, DynamoRule()),
        ]
        out[case] = [r.__dict__ for r in runs]
        if not args.json:
            base = runs[0].cost_usd
            print(f"{case}: {len(trace.columns)} requests over {trace.duration_s:.0f} s")
            for r in runs:
                hours = ", ".join(f"{k} {v:.2f}" for k, v in r.replica_hours.items())
                vs = r.cost_usd / base - 1
                print(
                    f"  {r.name:28s} SLO {r.slo_attainment:7.2%}  p99 TTFT {r.p99_ttft_s:6.2f} s  ${r.cost_usd:7.2f} "
                    f"({vs:+.0%} vs co-located)  replica-h {hours}  [{r.seconds:.0f} s]"
                )
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
