"""Simulator speed and fidelity.

speed    an hour of the Azure 2023 conversation trace on 8 replicas at request level (goal < 10 s), as a
         ratio to real time; named peer in the same run: the same simulator stepping every decode iteration
         one by one (`Replica.MAX_DECODE_STEPS_PER_EVENT = 1`, what a plain step-driven simulator does), on the
         first 10 minutes of the same trace so that it finishes; the ratio is ours over the peer's wall time.
fluid    the 10 ServeGen days (~1.8·10^8 requests) at the fluid level (goal < 120 s), as a ratio to real time.
validate request level against fluid level on the hour-long traces over a range of replica counts: mean
         queue depth (sampled every 10 s), TTFT p50/p90/p99, mean KV usage, prefix-cache hit rate, and the
         replica need (fewest replicas whose TTFT p99 is within --slo-s).

Medians over --rounds for timings; the last line of `speed` is `ratio: N.NN`.

    .venv/bin/python bench/simulator.py [speed|fluid|validate|all] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator import Fleet, FleetConfig, load_trace  # noqa: E402
from simulator.replica import Replica  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"


def _replay(trace, replicas: int, fidelity: str = "request", sample_s: float = 10.0):  # type: ignore[no-untyped-def]
    fleet = Fleet(FleetConfig(replicas=replicas, fidelity=fidelity), trace)
    queue, kv = [], []
    t = 0.0
    end = trace.duration_s
    while t < end:
        t = min(t + sample_s, end)
        fleet.advance_to(t)
        snap = fleet.snapshot()
        queue.append(sum(r.requests_waiting for r in snap.replicas) + snap.unrouted_waiting)
        kv.append(float(np.mean([r.kv_usage for r in snap.replicas])) if snap.replicas else 0.0)
    snap = fleet.snapshot()
    queries = sum(r.prefix_queries_total for r in snap.replicas)
    hits = sum(r.prefix_hits_total for r in snap.replicas) / queries if queries else 0.0
    return fleet, float(np.mean(queue)), float(np.mean(kv)), hits


def _timed(fn, rounds: int) -> float:  # type: ignore[no-untyped-def]
    walls = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def speed(rounds: int) -> None:
    hour = load_trace(TRACES / "azure2023_conv.csv")
    ours_hour = _timed(lambda: Fleet(FleetConfig(replicas=8), hour).advance_to(hour.duration_s), rounds)
    print(f"request level, azure2023_conv ({len(hour.requests)} requests, {hour.duration_s:.0f} s), 8 replicas:")
    print(f"  wall {ours_hour:.2f} s (median of {rounds}), {hour.duration_s / ours_hour:.0f}x real time, goal < 10 s")
    part = load_trace(TRACES / "azure2023_conv.csv", duration_s=600)
    ours, peer = [], []
    for _ in range(rounds):
        Replica.MAX_DECODE_STEPS_PER_EVENT = 1 << 30
        ours.append(_timed(lambda: Fleet(FleetConfig(replicas=8), part).advance_to(part.duration_s), 1))
        Replica.MAX_DECODE_STEPS_PER_EVENT = 1
        peer.append(_timed(lambda: Fleet(FleetConfig(replicas=8), part).advance_to(part.duration_s), 1))
    Replica.MAX_DECODE_STEPS_PER_EVENT = 1 << 30
    o, p = statistics.median(ours), statistics.median(peer)
    print(f"first 600 s, 8 replicas: ours {o:.3f} s, step-by-step peer {p:.3f} s (medians, alternating)")
    print(f"ratio: {o / p:.2f}")


def fluid(rounds: int) -> None:
    trace = load_trace(TRACES / "servegen_m-large_days1-10")
    expected = trace.expected_requests()
    wall = _timed(lambda: Fleet(FleetConfig(replicas=60, fidelity="fluid"), trace).advance_to(trace.duration_s), rounds)
    print(f"fluid level, ServeGen m-large 10 days ({expected:.3g} requests, {trace.duration_s:.0f} s), 60 replicas:")
    print(f"  wall {wall:.2f} s (median of {rounds}), {trace.duration_s / wall:.0f}x real time, goal < 120 s")


CASES = [
    ("azure2023_conv.csv", 4.0, (2, 3, 4, 6)),
    ("azure2023_code.csv", 4.0, (2, 3, 4, 6, 8, 12)),
    ("mooncake_synthetic_trace.jsonl", 1.0, (2, 4, 6, 8, 12)),
]


def validate(slo_s: float) -> None:
    print(f"request level vs fluid level; queue = mean waiting requests; need = fewest replicas with p99 <= {slo_s} s")
    print(f"{'trace':32} {'rate':>4} {'reps':>4} | {'queue req/fluid':>17} | {'TTFT p50 req/fluid':>19} | "
          f"{'p90 req/fluid':>15} | {'p99 req/fluid':>15} | {'KV req/fluid':>13} | {'hit req/fluid':>11}")  # fmt: skip
    for name, rate, counts in CASES:
        trace = load_trace(TRACES / name, rate_scale=rate)
        need: dict[str, int | None] = {"request": None, "fluid": None}
        for n in counts:
            row = {}
            for fidelity in ("request", "fluid"):
                fleet, q, kv, hit = _replay(trace, n, fidelity)
                row[fidelity] = (q, fleet.ttft_quantiles((0.5, 0.9, 0.99)), kv, hit)
                if need[fidelity] is None and row[fidelity][1][0.99] <= slo_s:
                    need[fidelity] = n
            (qr, tr, kr, hr), (qf, tf, kf, hf) = row["request"], row["fluid"]
            print(f"{name:32} {rate:4.1f} {n:4d} | {qr:8.1f}/{qf:8.1f} | {tr[0.5]:9.3f}/{tf[0.5]:9.3f} | "
                  f"{tr[0.9]:7.2f}/{tf[0.9]:7.2f} | {tr[0.99]:7.2f}/{tf[0.99]:7.2f} | {kr:6.3f}/{kf:6.3f} | "
                  f"{hr:5.3f}/{hf:5.3f}")  # fmt: skip
        print(f"{name:32} replica need (p99 <= {slo_s} s): request {need['request']}, fluid {need['fluid']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", default="all", choices=["speed", "fluid", "validate", "all"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slo-s", type=float, default=2.0)
    args = parser.parse_args()
    if args.part in ("validate", "all"):
        validate(args.slo_s)
    if args.part in ("fluid", "all"):
        fluid(args.rounds)
    if args.part in ("speed", "all"):
        speed(args.rounds)


if __name__ == "__main__":
    main()
