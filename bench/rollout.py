"""A rolling update at peak, with and without kvpilot's surge, on the request-level simulator.

The simulator's `rollout` fault replaces replicas in waves (maxSurge 0: each wave drains `wave` old replicas and
cold-starts as many new ones; the next wave starts once they are ready). Three runs on the same trace segment:

- baseline: no rollout;
- rollout: the waves alone, the fleet one wave short for a cold start per wave;
- rollout + surge: `scaler.rollout.surge_replicas` asked for one cold start before the rollout (desired plus the
  first wave, which starts within a cold start) and dropped back once the rollout is done.

Reported: TTFT SLO attainment of the requests arriving during the rollout window, and what the surge cost in
replica-hours (replicas alive, loading included, integrated over the run, minus the baseline's).

Run: `.venv/bin/python bench/rollout.py [--trace FILE] [--rate-scale X] [--replicas N] [--wave N]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaler.rollout import surge_replicas  # noqa: E402
from simulator import Fleet, FleetConfig, load_trace, parse_fault  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
TICK_S = 5.0
COLD_S = 120.0
T_ROLLOUT = 600.0
SLO_S = 2.0


def run(trace_path: str, rate_scale: float, replicas: int, wave: int, mode: str) -> tuple[float, float, float]:
    """(attainment in the rollout window, replica-hours, end of the rollout window) for one mode."""
    trace = load_trace(trace_path, seed=7, rate_scale=rate_scale, start_s=600.0, duration_s=2400.0)
    fleet = Fleet(FleetConfig(replicas=replicas, cold_start_s=COLD_S, routing="least_loaded", seed=7), trace)
    surge = surge_replicas(
        desired=replicas,
        old_remaining=replicas,
        wave_size=wave,
        wave_in_progress=False,
        next_wave_in_s=COLD_S,
        cold_start_s=COLD_S,
    )
    window_end = T_ROLLOUT + (replicas // wave + 2) * COLD_S
    replica_s = 0.0
    rolled = False
    t = 0.0
    while t < trace.duration_s:
        t += TICK_S
        if mode == "surge" and t == T_ROLLOUT - COLD_S:
            fleet.set_replicas(surge)
        if mode != "baseline" and t == T_ROLLOUT:
            fleet.inject(parse_fault({"type": "rollout", "wave_size": wave, "model_name": "next"}))
        fleet.advance_to(t)
        snap = fleet.snapshot()
        replica_s += len(snap.replicas) * TICK_S
        new_and_ready = all(r.model_name == "next" and r.state == "ready" for r in snap.replicas)
        if mode == "surge" and not rolled and t > T_ROLLOUT and new_and_ready:
            rolled = True  # the rollout is done: back to what demand needs
            fleet.set_replicas(replicas)
    done = [f for f in fleet.finished() if T_ROLLOUT <= f.arrival_s < window_end]
    attained = sum(f.ttft_s <= SLO_S for f in done) / max(len(done), 1)
    return attained, replica_s / 3600.0, window_end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(TRACES / "azure2023_conv.csv"))
    parser.add_argument("--rate-scale", type=float, default=12.0)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--wave", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    base = None
    for mode in ("baseline", "rollout", "surge"):
        attained, hours, end = run(args.trace, args.rate_scale, args.replicas, args.wave, mode)
        base = hours if base is None else base
        print(
            f"{mode:<9} TTFT <= {SLO_S:g} s for {attained:.2%} of requests arriving {T_ROLLOUT:.0f}-{end:.0f} s; "
            f"{hours:.2f} replica-hours ({hours - base:+.2f})",
            flush=True,
        )
    print(f"(wall {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
