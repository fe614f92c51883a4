"""Detectors measured on the simulator, each beside a naive peer measured in the same run.

1. KV pressure: traffic ramps (diurnal rise of a synthetic trace, seeds and slopes varied) until a replica preempts.
   Share of preempting replicas warned >= 60 s before their first preemption, by kvpilot's kv_exhaustion
   (trend projection + hysteresis) and by the peer, a static "kv_usage >= 0.9 for 2 ticks" alert; plus the
   false warnings of each on ramps that stop short of preemption.
2. Prefix-cache misses: the gateway switches from prefix-affinity to round-robin routing (must fire), and the
   traffic stops sharing prefixes under unchanged routing (must stay silent). Peer: a static "hit ratio fell
   by 40 % against its baseline" rule, which cannot tell the two apart.
3. Healthy fleet: 100 GPUs (100 single-GPU replicas) for 24 simulated hours of the real ServeGen m-large day 1
   (fluid level, 5 s ticks): drain findings from kvpilot's stuck_gpu (must be 0) and from a naive peer that
   drains on any non-zero XID or on a GPU at >= 95 % utilisation for two ticks.

Run: `.venv/bin/python bench/detectors.py [--quick]`; prints a table to paste into BENCHMARKS.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/detectors.py`, this file's folder comes first on sys.path and its name would shadow
# the `detectors` package it measures.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import argparse
import statistics
import time
from dataclasses import dataclass

from collector.state import FleetState
from detectors.registry import Detection
from kvpilot.commands.detect import samples_from_snapshot
from simulator import Fleet, FleetConfig, load_trace, parse_fault
from simulator.trace.model import RequestColumns, Trace
from simulator.trace.prefixes import PrefixModel, synthesize_prefixes

TICK_S = 5.0
LEAD_S = 60.0
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
SERVEGEN = TRACES / "servegen_m-large_days1-10"
T_CHANGE = 900.0


def _state() -> FleetState:
    return FleetState(stale_after_s=3 * TICK_S, forget_after_s=3600)


# -- 1. KV pressure ---------------------------------------------------------------------------------------


@dataclass
class KvEpisode:
    first_preempt: dict[str, float]  # replica -> time of its first preemption
    kvpilot_warn: dict[str, float]  # replica -> first kv_exhaustion finding opened (before its preemption)
    static_warn: dict[str, float]


def kv_episode(rate: float, period_s: float, seed: int, replicas: int) -> KvEpisode:
    spec = (
        f"synthetic:duration_s={period_s / 2:g},rate={rate:g},amplitude=1,period_s={period_s:g},bursts=0,"
        "prompt_mean=2000,output_mean=600"
    )
    fleet = Fleet(FleetConfig(replicas=replicas, routing="least_loaded", seed=seed), load_trace(spec, seed=seed))
    state, det = _state(), Detection(only=["kv_exhaustion"])
    ep = KvEpisode({}, {}, {})
    static_streak: dict[str, int] = {}
    t = 0.0
    while t < period_s / 2:
        t += TICK_S
        fleet.advance_to(t)
        snap = fleet.snapshot()
        reps, gpus, nodes = samples_from_snapshot(snap, now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        for f in det.tick(state, now=t).opened:
            ep.kvpilot_warn.setdefault(f.subject.replica, t)
        for r in snap.replicas:
            static_streak[r.name] = static_streak.get(r.name, 0) + 1 if r.kv_usage >= 0.9 else 0
            if static_streak[r.name] >= 2:
                ep.static_warn.setdefault(r.name, t)
            if r.preemptions_total > 0:
                ep.first_preempt.setdefault(r.name, t)
        if len(ep.first_preempt) == len(snap.replicas):
            break
    return ep


def bench_kv(quick: bool) -> dict[str, str]:
    # Ramps that end in preemption (rate x2 at the peak of the half period) and ramps that do not.
    # Thresholds were tuned on seeds 1-3 (see detectors/thresholds.py); what is reported runs on seeds 4-6.
    grid = [(rate, period, seed) for rate in (3.5, 4.0, 5.0, 6.0) for period in (2400.0, 3600.0) for seed in (4, 5, 6)]
    healthy = [(rate, period, seed) for rate in (2.5, 3.0) for period in (2400.0, 3600.0) for seed in (4, 5, 6)]
    if quick:
        grid, healthy = grid[:4], healthy[:2]
    leads: dict[str, list[float | None]] = {"kvpilot": [], "static": []}
    false_warn = {"kvpilot": 0, "static": 0}
    healthy_replicas = 0
    for rate, period, seed in grid:
        ep = kv_episode(rate, period, seed, replicas=1)
        for replica, tp in ep.first_preempt.items():
            for name, warns in (("kvpilot", ep.kvpilot_warn), ("static", ep.static_warn)):
                tw = warns.get(replica)
                leads[name].append(tp - tw if tw is not None and tw <= tp else None)
    for rate, period, seed in healthy:
        ep = kv_episode(rate, period, seed, replicas=1)
        for replica in ep.kvpilot_warn.keys() | ep.static_warn.keys() | {"llama-0000"}:
            if replica in ep.first_preempt:
                continue
            healthy_replicas += 1
            false_warn["kvpilot"] += replica in ep.kvpilot_warn
            false_warn["static"] += replica in ep.static_warn
    out = {}
    for name, values in leads.items():
        ok = [v for v in values if v is not None and v >= LEAD_S]
        known = [v for v in values if v is not None]
        out[name] = (
            f"{len(ok)}/{len(values)} warned >= {LEAD_S:g} s ahead ({len(ok) / max(len(values), 1):.0%}); "
            f"median lead {statistics.median(known) if known else float('nan'):.0f} s; "
            f"false warnings on {false_warn[name]}/{healthy_replicas} non-preempting ramps"
        )
    return out


# -- 2. Prefix-cache misses -------------------------------------------------------------------------------


def shared_documents_trace() -> Trace:
    """A stationary workload whose prefixes reward affinity: 16 req/s of ~6k-token prompts, 90 % of which start
    with one of 600 shared 4-8k-token documents (Zipf 0.5), for 30 minutes. (The Mooncake trace has real hash
    ids but its sharing grows from 5 % to 87 % over its 17 minutes: no stationary baseline to compare against;
    the default synthetic prefixes reward affinity by only 0.33 -> 0.28.)"""
    base = load_trace("synthetic:duration_s=1800,rate=16,amplitude=0,bursts=0,prompt_mean=6000,output_mean=200", seed=7)
    cols = base.columns
    model = PrefixModel(
        groups=600, zipf_s=0.5, share_fraction=0.9, min_shared_tokens=4096, max_shared_tokens=8192, session_fraction=0
    )
    blocks = synthesize_prefixes(cols.prompt_tokens, seed=7, model=model)
    columns = RequestColumns(cols.arrival_s, cols.prompt_tokens, cols.output_tokens, blocks)
    return Trace(name="shared-documents", duration_s=base.duration_s, _columns=columns)


def _unshared_after(trace: Trace, t_change: float) -> Trace:
    """The same arrivals and lengths, but every request after `t_change` shares no prefix with any other."""
    cols = trace.columns
    blocks = list(cols.prefix_blocks)
    base = 1 << 50
    for i, (a, b) in enumerate(zip(cols.arrival_s.tolist(), blocks, strict=True)):
        if a >= t_change:
            blocks[i] = tuple(base + i * 4096 + k for k in range(len(b)))
    return Trace(
        name=trace.name + "+unshared",
        duration_s=trace.duration_s,
        _columns=RequestColumns(cols.arrival_s, cols.prompt_tokens, cols.output_tokens, blocks),
    )


def prefix_run(case: str, quick: bool) -> tuple[float | None, float | None, float, float]:
    """(kvpilot fired at, static peer fired at, hit ratio before, after) for one case over 8 replicas; the change
    happens at T_CHANGE."""
    trace = shared_documents_trace()
    if case == "no_shared_prefixes":
        trace = _unshared_after(trace, T_CHANGE)
    fleet = Fleet(FleetConfig(replicas=8, routing="prefix_affinity", seed=7), trace)
    state, det = _state(), Detection(only=["prefix_cache_miss"])
    fired = peer = None
    streak = 0
    before: list[float] = []
    after: list[float] = []
    t = 0.0
    while t < trace.duration_s:
        t += TICK_S
        if case == "routing_change" and abs(t - T_CHANGE) < TICK_S / 2:
            fleet.inject(parse_fault({"type": "routing", "routing": "round_robin"}))
        fleet.advance_to(t)
        reps, gpus, nodes = samples_from_snapshot(fleet.snapshot(), now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        if det.tick(state, now=t).opened and fired is None:
            fired = t
        ratio = state.deployments()["inference/llama"].prefix_hit_ratio
        if ratio is None or t <= 60:
            continue
        (before if t < T_CHANGE else after).append(ratio)
        # The peer: a static rule, "hit ratio below 60 % of its median so far, for 3 ticks".
        base = statistics.median(before) if len(before) > 12 else None
        low = base is not None and ratio < 0.6 * base
        streak = streak + 1 if low else 0
        if peer is None and streak >= 3:
            peer = t
    return fired, peer, statistics.median(before), statistics.median(after[len(after) // 2 :])


def _when(t: float | None) -> str:
    return "silent" if t is None else f"fired at {t:.0f} s (change at {T_CHANGE:.0f} s)"


def _right(t: float | None, should_fire: bool) -> str:
    return "right" if (t is not None) == should_fire else "WRONG"


def bench_prefix(quick: bool) -> dict[str, str]:
    out = {}
    for case, should_fire in (("routing_change", True), ("no_shared_prefixes", False)):
        fired, peer, before, after = prefix_run(case, quick)
        out[case] = (
            f"hit ratio {before:.2f} -> {after:.2f}; kvpilot {_when(fired)} ({_right(fired, should_fire)}); "
            f"static peer {_when(peer)} ({_right(peer, should_fire)})"
        )
    return out


# -- 3. Healthy fleet, 100 GPUs, 24 h ---------------------------------------------------------------------


def _positive_control() -> dict[str, int]:
    """The same detector does flag real faults, within 2 ticks. At the request level: the fluid level zeroes a
    hung replica's counters instead of freezing them, so a hang cannot show there."""
    fleet = Fleet(FleetConfig(replicas=8, routing="least_loaded", seed=3), load_trace("synthetic:rate=20", seed=3))
    state, det = _state(), Detection(only=["stuck_gpu"])
    flagged: dict[str, int] = {}
    t = 0.0
    while t < 330:
        t += TICK_S
        if t == 300:
            fleet.inject(parse_fault({"type": "xid", "node": "node-0", "gpu": 0, "xid": 79}))
            fleet.inject(parse_fault({"type": "hung_gpu", "node": "node-0", "gpu": 5}))
        fleet.advance_to(t)
        reps, gpus, nodes = samples_from_snapshot(fleet.snapshot(), now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        for f in det.tick(state, now=t).opened:
            if f.action == "drain_node":
                flagged.setdefault(str(f.evidence["condition"]), round((t - 300) / TICK_S) + 1)
    return flagged


def bench_healthy(quick: bool) -> dict[str, str]:
    hours = 2.0 if quick else 24.0
    trace = load_trace(str(SERVEGEN), duration_s=hours * 3600, seed=11, rate_scale=0.5)
    cfg = FleetConfig(replicas=100, routing="least_loaded", fidelity="fluid", seed=11, fluid_step_s=TICK_S)
    fleet = Fleet(cfg, trace)
    state, det = _state(), Detection(only=["stuck_gpu"])
    kv_drains: set[str] = set()
    peer_drains: set[str] = set()
    streak: dict[str, int] = {}
    opened = 0
    ticks = 0
    t = 0.0
    started = time.perf_counter()
    while t < hours * 3600:
        t += TICK_S
        ticks += 1
        fleet.advance_to(t)
        snap = fleet.snapshot()
        reps, gpus, nodes = samples_from_snapshot(snap, now=t)
        state.observe(reps, gpus, now=t, gpu_nodes_scraped=nodes)
        for f in det.tick(state, now=t).opened:
            opened += 1
            if f.action == "drain_node":
                kv_drains.add(f.id)
        for g in snap.gpus:
            key = f"{g.node}/{g.index}"
            streak[key] = streak.get(key, 0) + 1 if g.utilisation >= 0.95 and g.pod else 0
            if g.last_xid or streak[key] >= 2:
                peer_drains.add(key)
    elapsed = time.perf_counter() - started
    gpus = len(fleet.snapshot().gpus)
    flagged = _positive_control()
    return {
        "control": f"request level, XID 79 + hung GPU injected at 300 s: flagged after {flagged} ticks",
        "kvpilot": f"{len(kv_drains)} drain findings ({opened} stuck_gpu findings of any action)",
        "peer": f"{len(peer_drains)} GPUs drained by the naive peer (XID != 0 or util >= 95 % for 2 ticks)",
        "run": f"{gpus} GPUs x {hours:g} h at {TICK_S:g} s ticks ({ticks} ticks) in {elapsed:.0f} s",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer episodes, 2 h instead of 24 h")
    parser.add_argument("--only", choices=("kv", "prefix", "healthy"), action="append")
    args = parser.parse_args()
    parts = {"kv": bench_kv, "prefix": bench_prefix, "healthy": bench_healthy}
    for name in args.only or parts:
        started = time.perf_counter()
        for key, line in parts[name](args.quick).items():
            print(f"{name:<8} {key:<20} {line}")
        print(f"{name:<8} {'(wall)':<20} {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
