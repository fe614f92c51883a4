"""The demo's opening minutes over fixed replica schedules, without kvpilot: is a queue seen at a tick built by too
few replicas, and would a replica ordered earlier have removed it?

The demo's fleet exactly (its trace ×8 cut by the same seed, the simulator's replica profile, prefix-affinity
routing, 120 s cold start), advanced in 5 s ticks as `kvpilot demo` advances it, with the replica count set by a
schedule instead of the planner: ``2`` keeps two replicas; ``3@165`` orders a third at 165 s (serving one cold start
later), as the planner did on seeds 152 and 153; ``4@0`` starts with two more loading. Per schedule: the ticks in
[0, --until) whose requests waiting on the replicas exceed --waiting, the waiting per replica at the --at ticks,
the share of the requests that arrived before --until with a first token within 2 s (the demo's SLO), and the TTFT
of the arrivals in --window. BENCHMARKS.md ("Demo": "Seeds 152 and 153's first scale-up") and docs/scaling.md cite it.

With --live, the demo itself (`kvpilot demo`'s run, cut at --until) and what the planner knew at each tick, read from
the tick's snapshot: the arrival rate it read, its forecast at the horizon (point, upper), the capacity a replica,
upper / (capacity × multiplier × target utilisation), the count it decided and why, the waiting per ready replica;
with --mix also the token mix (prompt / output tokens a request) the tick's counters were believed to read, if any,
and the belief the profile was asked about (the planner's smoothed mix). Under load the demo's scrape loop can time
a replica out (stderr: "timed out after 4.5 s"), which changes its readings: compare runs without one.

    nice .venv/bin/python bench/demo_first_scale_up.py --seeds 152 153 --schedules 2 3@165 3@100 3@40 3@0 4@0
    nice .venv/bin/python bench/demo_first_scale_up.py --seeds 152 153 --live --until 240
    nice .venv/bin/python bench/demo_first_scale_up.py --seeds 64 233 --live --mix --until 300
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import sys
from pathlib import Path

# Run as `python bench/demo_first_scale_up.py`, this file's folder comes first on sys.path: put the repository there.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvpilot.demo.replay import DEFAULT_TRACE, SIM_EPOCH, DemoConfig, run_demo  # noqa: E402
from kvpilot.runtime.snapshot import Snapshot  # noqa: E402
from scaler import planner as _planner  # noqa: E402
from scaler.capacity import TokenMix  # noqa: E402
from scaler.policy import PolicyConfig  # noqa: E402
from simulator import PROFILES, Fleet, FleetConfig, load_trace  # noqa: E402
from simulator.routing import ROUTERS  # noqa: E402

TICK_S = 5.0
DRAIN_S = 180.0


def parse_schedule(text: str) -> tuple[int, float | None]:
    """``N@T``: N replicas from T s on (the demo's two before); ``N``: N throughout."""
    count, _, at = text.partition("@")
    return int(count), float(at) if at else None


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile (nan for none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run(seed: int, schedule: str, args: argparse.Namespace) -> str:
    demo = DemoConfig(seed=seed)
    profile = PROFILES[demo.profile]
    if args.max_batched_tokens is not None:
        profile = dataclasses.replace(profile, max_num_batched_tokens=args.max_batched_tokens)
    count, at = parse_schedule(schedule)
    start = demo.replicas if at is not None else count
    trace = load_trace(DEFAULT_TRACE, rate_scale=demo.rate_scale, seed=seed, duration_s=demo.duration_s)
    cfg = FleetConfig(profile=profile, replicas=start, cold_start_s=demo.cold_start_s, routing=args.routing, seed=seed)
    fleet = Fleet(cfg, trace)
    if at is not None and at <= 0:
        fleet.set_replicas(count)
    over: list[str] = []
    shown: list[str] = []
    t = 0.0
    # Past --until by a drain, so that what arrived before it has its first token (TTFTs under a few seconds here).
    while t < args.until + DRAIN_S:
        t += TICK_S
        fleet.advance_to(t)
        if at is not None and 0 < at <= t < at + TICK_S:
            fleet.set_replicas(count)
        if t > args.until:
            continue
        waiting = [r.requests_waiting for r in fleet.snapshot().replicas]
        if sum(waiting) > args.waiting:
            over.append(f"{t:.0f} s {sum(waiting)}")
        if any(abs(t - a) < 1e-9 for a in args.at):
            shown.append(f"{t:.0f} s {'+'.join(str(w) for w in waiting)}")
    finished = [f for f in fleet.finished() if f.arrival_s < args.until]
    slo = sum(1 for f in finished if f.ttft_s <= demo.slo_ttft_s) / max(len(finished), 1)
    lo, hi = args.window
    clump = [f.ttft_s for f in finished if lo <= f.arrival_s < hi]
    routed = "" if args.routing == "prefix_affinity" else f" {args.routing}"
    return (
        f"seed {seed}  {schedule:>6}{routed}  in SLO [0, {args.until:g}) {100 * slo:.2f} %  "
        f"TTFT of arrivals [{lo:g}, {hi:g}) p99 {quantile(clump, 0.99):.2f} s max {max(clump, default=math.nan):.2f} s"
        f"  waiting at {', '.join(shown) or '-'}  ticks > {args.waiting}: {len(over)} ({', '.join(over)})"
    )


def _mix_text(mix: TokenMix | None) -> str:
    return "-" if mix is None else f"{mix.prompt_tokens:.0f}/{mix.output_tokens:.0f}"


def live(seed: int, until: float, mix: bool = False) -> list[str]:
    """The demo's ticks up to ``until``, one line each, from the snapshot kvpilot's loop made of it; with ``mix``, the
    mix the tick's counters were believed to read and the planner's belief (its `_observe_mix`, watched)."""
    utilisation = PolicyConfig().target_utilisation
    lines = ["t  read  point  upper  capacity  need  current -> desired (reason)  waiting per ready replica"]
    if mix:
        lines[0] += "  mix read  belief"
    mixes: dict[float, str] = {}
    observe = _planner._DeploymentPlanner._observe_mix

    def watched(self: _planner._DeploymentPlanner, now: float, reading: TokenMix | None, ready: int) -> TokenMix | None:
        belief = observe(self, now, reading, ready)
        mixes[now] = f"  {_mix_text(reading)}  {_mix_text(belief)}"
        return belief

    def tick(snap: Snapshot | None, *_: object) -> None:
        if snap is None:
            return
        for key, d in sorted(snap.decisions.items()):
            if d.timestamp != snap.t:
                continue
            f, view = d.forecast, snap.deployments.get(key)
            cap = f.get("capacity_rps", math.nan)
            planned = cap * f.get("capacity_multiplier", 1.0) * utilisation
            need = f.get("arrival_rate_upper", math.nan) / planned if planned > 0 else math.nan
            waiting = [] if view is None else [r.sample.requests_waiting for r in view.replicas if r.ready]
            numbers = [f.get(k, math.nan) for k in ("arrival_rate_now", "arrival_rate", "arrival_rate_upper")]
            lines.append(
                f"{snap.t - SIM_EPOCH:4.0f}  " + "  ".join(f"{x:5.1f}" for x in numbers) + f"  {cap:8.1f}  {need:4.2f}"
                f"  {d.current_replicas} -> {d.desired_replicas} ({d.reason})  "
                + "+".join(f"{w or 0:.0f}" for w in waiting)
                + (mixes.get(d.timestamp, "") if mix else "")
            )

    if mix:
        _planner._DeploymentPlanner._observe_mix = watched  # type: ignore[method-assign]
    try:
        asyncio.run(run_demo(DemoConfig(speed=0.0, seed=seed, duration_s=until), on_update=tick))
    finally:
        _planner._DeploymentPlanner._observe_mix = observe  # type: ignore[method-assign]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[152, 153])
    parser.add_argument("--schedules", nargs="+", default=["2", "3@165", "3@100", "3@40", "3@0", "4@0"])
    parser.add_argument("--until", type=float, default=420.0, help="simulated seconds (default 420)")
    parser.add_argument("--at", type=float, nargs="*", default=[160.0, 165.0, 170.0], help="ticks to show")
    parser.add_argument("--window", type=float, nargs=2, default=[155.0, 170.0], help="arrivals whose TTFT to show")
    parser.add_argument("--waiting", type=int, default=5, help="the goal's bound on requests waiting (default 5)")
    parser.add_argument(
        "--max-batched-tokens", type=int, default=None, help="the engine's step budget (default: as profiled)"
    )
    parser.add_argument(
        "--routing",
        default="prefix_affinity",
        choices=sorted(ROUTERS),
        help="the gateway's routing (default: the demo's, prefix_affinity)",
    )
    parser.add_argument("--live", action="store_true", help="the demo itself, tick by tick (the schedules unused)")
    parser.add_argument("--mix", action="store_true", help="with --live: each tick's mix reading and the belief")
    args = parser.parse_args()
    if args.live:
        for seed in args.seeds:
            print(f"seed {seed}", *live(seed, args.until, args.mix), sep="\n", flush=True)
        return
    for seed in args.seeds:
        for schedule in args.schedules:
            print(run(seed, schedule, args), flush=True)


if __name__ == "__main__":
    main()
