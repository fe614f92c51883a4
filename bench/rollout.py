"""A rolling update at peak, with and without kvpilot's surge, on the request-level simulator.

The simulator's `rollout` fault replaces replicas in waves (maxSurge 0: each wave drains `wave` old replicas and
cold-starts as many new ones; the next wave starts once they are ready). Three runs on the same trace segment:

- baseline: no rollout;
- rollout: the waves alone, the fleet one wave short for a cold start per wave;
- rollout + surge: `scaler.rollout.surge_replicas` asked for one cold start before the rollout (desired plus the
  first wave, which starts within a cold start) and dropped back once the rollout is done: an oracle that knows
  when the rollout starts;
- rollout + kvpilot: the count `kvpilot run` publishes, from what it sees each tick: the ready replicas' metrics
  through FleetState (the simulator's discovery lists only ready replicas) and the count the scale source reads,
  through the control loop's rollout stage (``kvpilot.rollout_stage``) on top of a planner decision of the
  fleet's own size (demand is steady at peak; the planner's own arithmetic is measured in the backtest). It sees
  the rollout once the first new replica serves, so the first wave runs short;
- rollout + kvpilot reading the Deployment (`kvpilot-k8s`): as `KubernetesScale` reads a Deployment's status
  (generation, updatedReplicas, the strategy's wave), emulated from the simulator's replicas, for the common
  `kubectl rollout pause` / `set image` / `rollout resume` sequence: the template changes one cold start before
  the operator resumes. kvpilot sees a rollout pending (replicas not on the newest template) at once and surges.

Reported: TTFT SLO attainment of the requests arriving during the rollout window, and what the surge cost in
replica-hours (replicas alive, loading included, integrated over the run, minus the baseline's).

Run: `.venv/bin/python bench/rollout.py [--trace FILE] [--rate-scale X] [--replicas N] [--wave N]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.state import FleetState  # noqa: E402
from kvpilot.commands.detect import samples_from_snapshot  # noqa: E402
from kvpilot.rollout_stage import RolloutStage  # noqa: E402
from scaler.decision import Decision  # noqa: E402
from scaler.rollout import DeploymentRollout, surge_replicas  # noqa: E402
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
    kvpilot = _Kvpilot(replicas, wave=wave, k8s=mode == "kvpilot-k8s") if mode.startswith("kvpilot") else None
    t = 0.0
    while t < trace.duration_s:
        t += TICK_S
        if mode == "surge" and t == T_ROLLOUT - COLD_S:
            fleet.set_replicas(surge)
        if mode != "baseline" and t == T_ROLLOUT:
            fleet.inject(parse_fault({"type": "rollout", "wave_size": wave, "model_name": "next"}))
        fleet.advance_to(t)
        snap = fleet.snapshot()
        if kvpilot is not None:
            kvpilot.tick(fleet, snap, t)
        replica_s += len(snap.replicas) * TICK_S
        new_and_ready = all(r.model_name == "next" and r.state == "ready" for r in snap.replicas)
        if mode == "surge" and not rolled and t > T_ROLLOUT and new_and_ready:
            rolled = True  # the rollout is done: back to what demand needs
            fleet.set_replicas(replicas)
    if kvpilot is not None:
        steps = ", ".join(f"{n} at {at:.0f} s" for at, n in kvpilot.published)
        print(f"          kvpilot published desired: {steps}", flush=True)
    done = [f for f in fleet.finished() if T_ROLLOUT <= f.arrival_s < window_end]
    attained = sum(f.ttft_s <= SLO_S for f in done) / max(len(done), 1)
    return attained, replica_s / 3600.0, window_end


class _Kvpilot:
    """What `kvpilot run` publishes for the fleet each tick, applied as KEDA would (spec.replicas = desired)."""

    def __init__(self, desired: int, *, wave: int, k8s: bool) -> None:
        self.desired = desired
        self.wave = wave
        self.k8s = k8s
        self.state = FleetState(stale_after_s=3 * TICK_S, forget_after_s=3600)
        self.stage = RolloutStage()
        self.listed: set[str] = set()
        self.published: list[tuple[float, int]] = []

    def tick(self, fleet: Fleet, snap: Any, t: float) -> None:
        ready = {r.name for r in snap.replicas if r.state == "ready"}
        samples, _, _ = samples_from_snapshot(snap, now=t)
        departed = {f"inference/{n}" for n in self.listed - ready}  # discovery stopped listing them
        self.listed = ready
        self.state.observe(
            [s for s in samples if s.replica in ready], [], now=t, gpu_nodes_scraped=set(), departed=departed
        )
        spec = sum(1 for r in snap.replicas if r.state != "draining")
        planned = Decision("inference/llama", t, spec, len(ready), self.desired, 0, "predictive", "steady demand")
        deployments = {"inference/llama": self._deployment(snap, t, spec)} if self.k8s else None
        (decision,) = self.stage.apply(self.state, [planned], t, deployments=deployments)
        if not self.published or self.published[-1][1] != decision.desired_replicas:
            self.published.append((t, decision.desired_replicas))
        if decision.desired_replicas != spec:
            fleet.set_replicas(decision.desired_replicas)

    def _deployment(self, snap: Any, t: float, spec: int) -> DeploymentRollout:
        """The Deployment's status as the apiserver would report it: the template changed (generation 2) at
        T_ROLLOUT - COLD_S (paused until T_ROLLOUT); updated = replicas on the new version, loading included."""
        changed = t >= T_ROLLOUT - COLD_S
        live = [r for r in snap.replicas if r.state != "draining"]
        return DeploymentRollout(
            generation=2 if changed else 1,
            observed_generation=2 if changed else 1,
            replicas=spec,
            updated_replicas=sum(1 for r in live if r.model_name == "next") if changed else spec,
            status_replicas=len(live),
            ready_replicas=sum(1 for r in live if r.state == "ready"),
            max_surge=0,
            max_unavailable=self.wave,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(TRACES / "azure2023_conv.csv"))
    parser.add_argument("--rate-scale", type=float, default=12.0)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--wave", type=int, default=1)
    parser.add_argument(
        "--modes", default="baseline,rollout,surge,kvpilot,kvpilot-k8s", help="comma-separated; baseline first"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    base = None
    for mode in args.modes.split(","):
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
