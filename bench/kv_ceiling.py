"""What a KV warning could see a minute ahead (issue 16): every preempting episode of bench/kv_episodes.py classed by
what its replicas showed 60 s before the first preemption, and how many any rule on those readings could warn.

Classes: *sudden* (the load rose less than 70 s before the first preemption, ``Episode.sudden``), *trace flood* (the
arrivals of the last 30 s carry a burst of the trace itself, ``Episode.trace_burst``), and the rest by the readings
60 s ahead, the highest of the replicas': the pool (KV usage peaked >= ``demand_min_usage`` within the rate window),
the demand (the planner's forecast along its trend >= ``demand_load`` of what the ready replicas serve) and its rise
(the demand's or the replica's own arrivals' trend >= ``demand_min_rise`` a minute). Beside each class: the quiet
episodes that show the same at some tick, i.e. that a rule reading only those signals warns too.

Then a ceiling for the default's rules plus any monotone rule (higher is worse in every feature) on the per-tick
features ``--features`` (two ticks in a row, as the hysteresis opens): for each preempting episode the default
misses, the fewest quiet episodes (not already warned by the default) that such a rule must also warn to warn it
>= 60 s ahead; greedily, how many more it could catch with quiet warned <= 20 %. In-sample and as loose as a
staircase in every feature can be: an upper bound, not a rule.

Run: `.venv/bin/python bench/kv_ceiling.py --cache-dir DIR --seeds 1,2 [--recordings DIR] [--features rho,rise,peak]`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Run as `python bench/kv_ceiling.py`, this file's folder comes first on sys.path and bench/detectors.py would shadow
# the `detectors` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.detectors import LEAD_S  # noqa: E402
from bench.kv_episodes import library  # noqa: E402
from bench.kv_replay import Reading, Recorded, default_judge, first_warning, record  # noqa: E402
from detectors._values import finite  # noqa: E402
from detectors.kv_exhaustion import KvReading  # noqa: E402
from detectors.thresholds import DEFAULT  # noqa: E402

KV = DEFAULT.kv
QUIET_GOAL = 0.20
FEATURES = ("rho", "rise", "peak", "usage", "waiting", "slope")


def features(r: KvReading) -> dict[str, float]:
    """The per-tick quantities, higher = closer to exhaustion: ``rho`` the replica's load now (the larger of its own
    arrivals and its share of the forecast, over what one replica serves), ``rise`` the faster of the demand's and
    its arrivals' rise (load a minute), the pool's ``peak`` and ``usage``, requests ``waiting``, the usage ``slope``
    (a minute). Unknown: 0 (nothing to warn on)."""
    d = r.demand
    cap = None if d is None else finite(d.capacity_rps)
    arrivals = finite(r.arrival_rate)
    own = arrivals / cap if cap and arrivals is not None else 0.0
    values = {
        "rho": max(own, r.load or 0.0),
        "rise": max(r.arrivals_rise or 0.0, r.demand_rise or 0.0),
        "peak": r.peak_usage,
        "usage": r.usage,
        "waiting": r.requests_waiting or 0.0,
        "slope": (r.slope_per_s or 0.0) * 60.0,
    }
    return {k: v if math.isfinite(v) else 0.0 for k, v in values.items()}


def signature(readings: Sequence[Reading]) -> str:
    """The class of one tick's readings (the highest of the replicas')."""
    peak = max(x.reading.peak_usage for x in readings)
    r = readings[0].reading
    load = (r.load_ahead if r.load_ahead is not None else r.load) or 0.0
    rise = max([r.demand_rise or 0.0, *((x.reading.arrivals_rise or 0.0) for x in readings)])
    pool = f"KV >= {KV.demand_min_usage:.0%}" if peak >= KV.demand_min_usage else f"KV < {KV.demand_min_usage:.0%}"
    demand = f"demand >= {KV.demand_load:g}" if load >= (KV.demand_load or 0.0) else f"demand < {KV.demand_load:g}"
    rising = "rising" if rise >= (KV.demand_min_rise or 0.0) else "level"
    return f"{pool}, {demand}, {rising}"


def _by_tick(rec: Recorded) -> dict[float, list[Reading]]:
    out: dict[float, list[Reading]] = defaultdict(list)
    for x in rec.readings:
        out[x.t].append(x)
    return out


def _pairs(rec: Recorded, which: Sequence[str], until: float = math.inf) -> np.ndarray:
    """Per replica, the elementwise least of two ticks in a row up to ``until``: what a rule must see twice."""
    seqs: dict[str, list[tuple[float, list[float]]]] = defaultdict(list)
    for x in rec.readings:
        if x.t <= until:
            f = features(x.reading)
            seqs[x.replica].append((x.t, [f[k] for k in which]))
    rows = [
        np.minimum(a, b)
        for seq in seqs.values()
        for (t0, a), (t1, b) in itertools.pairwise(seq)
        if abs(t1 - t0 - 5.0) < 1e-6
    ]
    return _pareto(np.array(rows)) if rows else np.zeros((0, len(which)))


def _pareto(a: np.ndarray) -> np.ndarray:
    keep: list[int] = []
    for i in np.argsort(-a.sum(axis=1)):
        if not any(bool(np.all(a[j] >= a[i])) for j in keep):
            keep.append(int(i))
    return a[keep]


def classify(recorded: Sequence[Recorded]) -> list[str]:
    classes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    quiet_seen: Counter[str] = Counter()
    quiet = preempting = caught_all = 0
    for rec in recorded:
        ep = rec.episode
        if not ep.usable:
            continue
        ticks = _by_tick(rec)
        if ep.first_preempt_s is None:
            quiet += 1
            quiet_seen.update({signature(rs) for rs in ticks.values()})
            continue
        first = ep.first_preempt_s
        warned = first_warning(rec, default_judge)
        caught = warned is not None and first - warned >= LEAD_S
        if ep.sudden(LEAD_S):
            cls = "sudden: the load rose < 70 s before"
        elif ep.trace_burst(LEAD_S):
            cls = "trace flood: the last 30 s carry a burst of the trace"
        else:
            ahead = ticks.get(first - LEAD_S)
            cls = "reachable: " + (signature(ahead) if ahead else "no reading")
        classes[cls][0] += 1
        classes[cls][1] += caught
        preempting += 1
        caught_all += caught
    lines = [f"{preempting} preempting, {quiet} quiet; the default catches {caught_all} >= {LEAD_S:g} s ahead"]
    for cls, (n, k) in sorted(classes.items()):
        sig = cls.removeprefix("reachable: ")
        shared = f"; quiet showing it at some tick {quiet_seen[sig]}/{quiet}" if cls.startswith("reachable") else ""
        lines.append(f"{n:4d}  {cls}: default caught {k}{shared}")
    return lines


def ceiling(recorded: Sequence[Recorded], which: Sequence[str]) -> list[str]:
    quiet: list[tuple[np.ndarray, bool]] = []
    missed: list[np.ndarray] = []
    preempting = caught = 0
    for rec in recorded:
        ep = rec.episode
        if not ep.usable:
            continue
        warned = first_warning(rec, default_judge)
        if ep.first_preempt_s is None:
            quiet.append((_pairs(rec, which), warned is not None))
            continue
        preempting += 1
        if warned is not None and ep.first_preempt_s - warned >= LEAD_S:
            caught += 1
        else:
            missed.append(_pairs(rec, which, ep.first_preempt_s - LEAD_S))
    needs: list[frozenset[int]] = []
    for points in missed:
        best: frozenset[int] | None = None
        for v in points:
            must = frozenset(
                i for i, (q, warned) in enumerate(quiet) if not warned and q.size and np.any(np.all(q >= v, axis=1))
            )
            if best is None or len(must) < len(best):
                best = must
        if best is not None:
            needs.append(best)
    budget = math.floor(QUIET_GOAL * len(quiet)) - sum(w for _, w in quiet)
    chosen: set[int] = set()
    added = 0
    while needs:
        needs.sort(key=lambda s: len(s - chosen))
        if len(chosen | needs[0]) > budget:
            break
        chosen |= needs.pop(0)
        added += 1
    warned = sum(w for _, w in quiet)
    top = caught + added
    return [
        f"features {','.join(which)}: default {caught}/{preempting} caught, {warned}/{len(quiet)} quiet warned; a "
        f"monotone rule could add at most {added} within <= {QUIET_GOAL:.0%} quiet: ceiling {top}/{preempting} "
        f"({top / max(preempting, 1):.0%})"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, required=True, help="the KV episodes (bench.kv_episodes.library)")
    parser.add_argument("--seeds", required=True, help="comma-separated seeds")
    parser.add_argument("--recordings", type=Path, help="keep each seed's recorded readings here (rec-SEED.pkl)")
    parser.add_argument("--features", default="rho,rise,peak", help=f"for the ceiling, among {','.join(FEATURES)}")
    args = parser.parse_args()
    which = args.features.split(",")
    if not set(which) <= set(FEATURES):
        parser.error(f"--features: among {','.join(FEATURES)}")
    recorded: list[Recorded] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        kept = None if args.recordings is None else args.recordings / f"rec-{seed}.pkl"
        if kept is not None and kept.exists():
            recorded.extend(pickle.loads(kept.read_bytes()))
            continue
        recs = [record(ep) for ep in library([seed], cache_dir=args.cache_dir)]
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(pickle.dumps(recs))
        recorded.extend(recs)
    for line in [*classify(recorded), *ceiling(recorded, which)]:
        print(line)


if __name__ == "__main__":
    main()
