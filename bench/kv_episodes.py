"""A labelled set of KV-pressure episodes built from the simulator on every shared trace.

Each episode replays a segment of one real trace through a small fleet (2 replicas) whose KV pool is the limit,
with the arrival rate shaped over time by thinning a rate-scaled copy of the trace. The shapes are the ones an
operator meets:

- ``plateau``: a rise that levels off near the highest rate the pool holds (the trap for a trend projection);
- ``ramp``: a rise that goes past what the pool holds;
- ``burst``: a step to a higher rate for 1-2 minutes, from a quiet base;
- ``leak``: a slow rise over the whole segment, ending below or past what the pool holds.

Levels are in units of the rate at which a constant-rate run keeps KV usage at or below 75 % nine ticks in ten,
calibrated per trace (``calibrate``); the label is what happened (a preemption counter that moved), never what
was aimed at. Episodes whose first preemption comes before ``MIN_HISTORY_S`` are set aside: no detector has a
trend to read yet, and they are counted apart.

Every tick's samples are kept, so detectors are compared on the very same episodes (bench/detectors.py).
"""

from __future__ import annotations

import math
import pickle
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector.samples import ReplicaSample
from kvpilot.commands.detect import samples_from_snapshot
from simulator import PROFILES, Fleet, FleetConfig, load_trace
from simulator.trace.model import RequestColumns, Trace

TICK_S = 5.0
DURATION_S = 900.0
MIN_HISTORY_S = 120.0
BURST_AT_S = 300.0
REPLICAS = 2
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
# (file, segment start in the trace for seed 0, a first guess at the calibrated rate scale, the replica profile).
# A profile whose KV pool is the limit for that trace's lengths: Llama-2-7B (no grouped-query attention, ~114k
# tokens of KV, 4k context) for the short-prompt traces; Llama-3-8B (~435k tokens, 32k context) for Mooncake's
# 12k-token median prompts.
TRACE_FILES: dict[str, tuple[str, float, float, str]] = {
    "azure_code": ("azure2023_code.csv", 600.0, 3.0, "llama2-7b-h100"),
    "azure_conv": ("azure2023_conv.csv", 600.0, 3.5, "llama2-7b-h100"),
    "mooncake": ("mooncake_synthetic_trace.jsonl", 0.0, 0.4, "llama3-8b-h100"),
    "servegen": ("servegen_m-large_days1-10", 3600.0, 0.02, "llama2-7b-h100"),
}
CALIBRATION_KV = 0.75
CALIBRATION_STEPS = 6
TUNING_SEEDS = (1, 2)
# Reporting seeds 19-20, declared 2026-12-06 13:25 UTC before anyone simulated them and scored once at 14:26
# (BENCHMARKS.md "Detectors", "KV: how far ahead a finding opens, and fresh reporting seeds 19-20"). 17-18 (declared
# 2026-12-05 12:06, scored once at 12:25, "KV: a fitted reading") and 15-16 (declared 06:18, scored once then) were
# read to fit, choose and diagnose since, as 11-12 (declared 2026-12-03 21:51) and 7-8 before them, so they are
# 'earlier' now (`--seeds 17,18` for 17-18). 3-4 were read when choosing between rules, so they are kept for
# continuity (and validation) only. The Azure and ServeGen segments are chosen by seed % 4: 19 replays the segment
# of 3, 7, 11 and 15 (resampled), 20 that of 4, 8, 12 and 16, 17 that of 1, 5, 9 and 13, 18 that of 2, 6, 10 and 14.
REPORTING_SEEDS = (19, 20)
EARLIER_REPORTING_SEEDS = (11, 12)
CONTINUITY_SEEDS = (3, 4)

Shape = Callable[[float], float]


def _plateau(level: float) -> Shape:
    return lambda t: 0.3 + (level - 0.3) * min(1.0, t / 400.0)


def _burst(level: float, length_s: float) -> Shape:
    return lambda t: level if BURST_AT_S <= t < BURST_AT_S + length_s else 0.4


def _leak(level: float) -> Shape:
    return lambda t: 0.3 + (level - 0.3) * t / DURATION_S


# (family, level, shape), levels in units of the calibrated rate (``calibrate``): plateaus, short bursts and the
# low leak are meant to stay clear of preemption, ramps, long bursts and the high leak not; the outcome labels.
SHAPES: tuple[tuple[str, float, Shape], ...] = (
    ("plateau", 0.8, _plateau(0.8)),
    ("plateau", 0.9, _plateau(0.9)),
    ("plateau", 1.0, _plateau(1.0)),
    ("ramp", 1.3, _plateau(1.3)),
    ("ramp", 1.8, _plateau(1.8)),
    ("burst", 1.0, _burst(1.0, 120.0)),
    ("burst", 1.8, _burst(1.8, 120.0)),
    ("burst", 3.0, _burst(3.0, 60.0)),
    ("leak", 1.0, _leak(1.0)),
    ("leak", 1.5, _leak(1.5)),
)


# A burst inside the trace segment (Episode.trace_burst): the arrivals over the last 30 s before the first
# preemption rose at least 1.5 times more than the shape explains, against the 2 minutes before the lead.
TRACE_BURST_S = 30.0
TRACE_BURST_RATIO = 1.5


def _shape(family: str, level: float) -> Shape:
    return next(shape for f, lv, shape in SHAPES if f == family and lv == level)


@dataclass
class Episode:
    trace: str
    family: str
    level: float
    seed: int
    ticks: list[tuple[float, list[ReplicaSample]]]
    first_preempt_s: float | None  # first tick at which any replica's preemption counter moved
    peak_kv: float  # highest KV usage of any replica
    plateau_kv: float  # median of the deployment's mean KV usage over the last third

    @property
    def preempting(self) -> bool:
        return self.first_preempt_s is not None

    @property
    def rise_s(self) -> float:
        """When the load starts to rise above its base (the burst's step; ramps and leaks rise from the start)."""
        return BURST_AT_S if self.family == "burst" else 0.0

    def sudden(self, lead_s: float) -> bool:
        """Preempting sooner than ``lead_s`` (plus the two ticks a finding needs to open) after the load began to
        rise: no detector that reads the fleet, not the future arrivals, can warn that far ahead."""
        return self.first_preempt_s is not None and self.first_preempt_s - self.rise_s < lead_s + 2 * TICK_S

    def arrival_rate(self, t0: float, t1: float) -> float | None:
        """Requests/s that reached the fleet over [t0, t1], from the samples (finished + in flight), or None."""

        def arrived(t: float) -> float | None:
            reps = next((r for tt, r in self.ticks if tt >= t), None)
            if not reps or any(r.requests_finished is None for r in reps):
                return None
            return sum(
                (r.requests_finished or 0.0) + (r.requests_running or 0.0) + (r.requests_waiting or 0.0) for r in reps
            )

        a, b = arrived(t0), arrived(t1)
        return None if a is None or b is None or t1 <= t0 else (b - a) / (t1 - t0)

    def trace_burst(self, lead_s: float) -> bool:
        """Preempting on a burst the trace segment itself carries, not the shape: arrivals over the
        ``TRACE_BURST_S`` before the first preemption rose at least ``TRACE_BURST_RATIO`` times more than the shape
        explains, against the 2 minutes that end ``lead_s`` before it. No signal that exists ``lead_s`` ahead
        (usage, queue, the arrivals so far, their forecast) carries such a burst."""
        first = self.first_preempt_s
        if first is None:
            return False
        before = self.arrival_rate(max(0.0, first - lead_s - 120.0), first - lead_s)
        late = self.arrival_rate(first - TRACE_BURST_S, first)
        if before is None or late is None or before <= 0:
            return False
        shape = _shape(self.family, self.level)
        rise = shape(first - TRACE_BURST_S / 2) / max(shape(first - lead_s - 60.0), 1e-9)
        return late / before >= TRACE_BURST_RATIO * rise

    @property
    def usable(self) -> bool:
        return self.first_preempt_s is None or self.first_preempt_s >= MIN_HISTORY_S


def _base_trace(name: str, rate_scale: float, seed: int) -> Trace:
    file, start, _, profile = TRACE_FILES[name]
    path = TRACES / file
    if name == "mooncake":
        start = 0.0  # 1,022 s long: the whole trace is the segment; seeds vary the resampling
    else:
        start += 600.0 * (seed % 4)
    trace = load_trace(str(path), seed=seed, rate_scale=rate_scale, start_s=start, duration_s=DURATION_S)
    # vLLM refuses a request longer than the model's context (HTTP 400, "This model's maximum context length is N
    # tokens"): it never reaches the KV pool, so it is left out here too.
    cols = trace.columns
    fits = (cols.prompt_tokens + cols.output_tokens <= PROFILES[profile].max_model_len).tolist()
    blocks = [b for b, k in zip(cols.prefix_blocks, fits, strict=True) if k]
    kept = RequestColumns(cols.arrival_s[fits], cols.prompt_tokens[fits], cols.output_tokens[fits], blocks)
    return Trace.from_columns(trace.name, trace.duration_s, kept)


def _shaped(base: Trace, shape: Shape, peak: float, seed: int) -> Trace:
    cols = base.columns
    rng = np.random.default_rng([seed, 0x5EED])
    keep = rng.random(len(cols)) < np.array([shape(float(a)) / peak for a in cols.arrival_s])
    blocks = [b for b, k in zip(cols.prefix_blocks, keep.tolist(), strict=True) if k]
    out = RequestColumns(cols.arrival_s[keep], cols.prompt_tokens[keep], cols.output_tokens[keep], blocks)
    return Trace.from_columns(base.name, base.duration_s, out)


def _run(
    name: str, trace: Trace, seconds: float
) -> tuple[list[tuple[float, list[ReplicaSample]]], float | None, list[float]]:
    profile = PROFILES[TRACE_FILES[name][3]]
    fleet = Fleet(FleetConfig(profile=profile, replicas=REPLICAS, routing="least_loaded"), trace)
    ticks: list[tuple[float, list[ReplicaSample]]] = []
    first: float | None = None
    mean_kv: list[float] = []
    t = 0.0
    while t < seconds:
        t += TICK_S
        fleet.advance_to(t)
        snap = fleet.snapshot()
        reps, _, _ = samples_from_snapshot(snap, now=t)
        ticks.append((t, reps))
        if first is None and any(r.preemptions_total > 0 for r in snap.replicas):
            first = t
        mean_kv.append(statistics.fmean(r.kv_usage for r in snap.replicas))
    return ticks, first, mean_kv


def calibrate(name: str, target: float = CALIBRATION_KV) -> float:
    """The rate scale whose constant-rate run keeps KV usage at ``target`` 90 % of the time (the 90th percentile,
    not the mean: on the on/off Azure code trace the mean stays low while bursts fill the pool): a bisection in
    log scale over 400 s runs. KV usage is far from linear in the rate (it stays low while the replicas keep up,
    then climbs steeply), so no proportional rule will do."""
    lo, hi = TRACE_FILES[name][2] / 4, TRACE_FILES[name][2] * 4
    for _ in range(CALIBRATION_STEPS):
        mid = math.sqrt(lo * hi)
        _, _, kv = _run(name, _base_trace(name, mid, seed=0), 400.0)
        if statistics.quantiles(kv[12:], n=10)[-1] < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def build(name: str, family: str, level: float, shape: Shape, seed: int, unit: float) -> Episode:
    peak = max(shape(t) for t in np.arange(0.0, DURATION_S, TICK_S))
    trace = _shaped(_base_trace(name, unit * peak, seed), shape, peak, seed)
    ticks, first, mean_kv = _run(name, trace, DURATION_S)
    peak_kv = max((r.kv_usage or 0.0) for _, reps in ticks for r in reps)
    plateau_kv = statistics.median(mean_kv[2 * len(mean_kv) // 3 :])
    return Episode(name, family, level, seed, ticks, first, peak_kv, plateau_kv)


def library(
    seeds: Sequence[int],
    *,
    traces: Iterable[str] = TRACE_FILES,
    quick: bool = False,
    cache_dir: Path | None = None,
    units: dict[str, float] | None = None,
) -> list[Episode]:
    """Every shape on every trace for every seed (quick: one plateau, one ramp, one burst per trace). With
    ``cache_dir``, each trace's episodes for one seed are kept in a pickle named after the trace, the seed and the
    mode, and read back on the next run (the simulation is deterministic: the same code and seed give the same
    episodes); one file per seed lets seeds be simulated by separate processes and read back together."""
    shapes = [SHAPES[i] for i in (2, 3, 6)] if quick else list(SHAPES)
    out: list[Episode] = []
    for name in traces:
        unit = None if units is None else units[name]
        for seed in seeds:
            cached = None if cache_dir is None else cache_dir / f"{name}-{seed}{'-quick' if quick else ''}.pkl"
            if cached is not None and cached.exists():
                out.extend(pickle.loads(cached.read_bytes()))
                continue
            if unit is None:
                unit = calibrate(name)
            episodes = [build(name, family, level, shape, seed, unit) for family, level, shape in shapes]
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_bytes(pickle.dumps(episodes))
            out.extend(episodes)
    return out
