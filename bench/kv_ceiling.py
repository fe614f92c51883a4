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

With ``--causes``, every preempting episode the default does not warn >= 60 s ahead is put in one class by why
(session 32): *sudden* (as above); (i) *nothing departs*: at every tick up to a minute ahead, more than 20 % of the
quiet episodes show a point at least as bad on every signal there is (the six readings and the engine's counters
the reading leaves out, ``SAMPLE_FEATURES``), so no causal rule on these signals warns it within the budget; (ii)
*only unread signals depart*: it departs within the budget only with ``SAMPLE_FEATURES`` added; (iii) *a read
signal departs*: it departs on the six readings alone, the default's thresholds miss it. Each class is necessary,
not sufficient: what departs one episode at a time may not depart together (the greedy ceilings say how many do).
No tick of an episode's first minute is read there (``SETTLE_S``: every episode starts from an empty pool).

Run: `.venv/bin/python bench/kv_ceiling.py --cache-dir DIR --seeds 1,2 [--recordings DIR] [--features rho,rise,peak]
[--causes]`.
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
from collector.samples import ReplicaSample  # noqa: E402
from detectors._values import finite  # noqa: E402
from detectors.kv_exhaustion import KvReading  # noqa: E402
from detectors.thresholds import DEFAULT  # noqa: E402

KV = DEFAULT.kv
QUIET_GOAL = 0.20
READ_FEATURES = ("rho", "rise", "peak", "usage", "waiting", "slope")
# The engine's counters the reading leaves out (issue 16: a pool fills at running sequences x tokens per second and
# drains as requests finish), worked out from the replica's samples one rate window apart (``sample_features``).
SAMPLE_FEATURES = ("decode", "fill", "committed", "wgrowth")
FEATURES = READ_FEATURES + SAMPLE_FEATURES
RATE_WINDOW_S = 60.0
# A pool with (almost) nothing free fills "this many times a minute" or more: any larger figure says the same.
FILL_CAP = 10.0


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


def _delta(now: float | None, before: float | None) -> float | None:
    return None if now is None or before is None else now - before


def sample_features(now: ReplicaSample, before: ReplicaSample | None) -> dict[str, float]:
    """From a replica's sample and its sample ``RATE_WINDOW_S`` earlier, higher = closer to exhaustion: ``decode``
    the tokens its running sequences added in a minute (generation tokens) over the free pool, ``fill`` the same
    with the prompt tokens admitted, ``committed`` the pool with every running sequence run to the mean output of the
    requests that finished and every waiting one admitted (session 28's reading: usage x capacity + running x m +
    waiting x (p + m), over the capacity), ``wgrowth`` the requests waiting added over the window. Unknown: 0."""
    out = dict.fromkeys(SAMPLE_FEATURES, 0.0)
    usage, capacity = finite(now.kv_usage), finite(now.kv_capacity_tokens)
    if before is None or usage is None or capacity is None or capacity <= 0:
        return out
    dt = now.timestamp - before.timestamp
    generated = _delta(now.generation_tokens, before.generation_tokens)
    prompts = _delta(now.prompt_tokens, before.prompt_tokens)
    finished = _delta(now.requests_finished, before.requests_finished)
    running, waiting = now.requests_running or 0.0, now.requests_waiting or 0.0
    free = max(1.0 - usage, 0.0) * capacity
    if dt > 0 and generated is not None:
        per_min = 60.0 / dt
        out["decode"] = min(generated * per_min / free, FILL_CAP) if free > 0 else FILL_CAP
        added = generated + (prompts or 0.0)
        out["fill"] = min(added * per_min / free, FILL_CAP) if free > 0 else FILL_CAP
    if generated is not None and finished is not None and finished > 0:
        output = generated / finished
        arrived = finished + running + waiting - (before.requests_running or 0.0) - (before.requests_waiting or 0.0)
        prompt = (prompts or 0.0) / arrived if arrived > 0 else 0.0
        out["committed"] = (usage * capacity + running * output + waiting * (prompt + output)) / capacity
    out["wgrowth"] = waiting - (before.requests_waiting or 0.0)
    return {k: v if math.isfinite(v) else 0.0 for k, v in out.items()}


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


def _samples(rec: Recorded) -> dict[tuple[str, float], ReplicaSample]:
    return {(s.replica, t): s for t, reps in rec.episode.ticks for s in reps}


def _pairs(rec: Recorded, which: Sequence[str], until: float = math.inf, since: float = 0.0) -> np.ndarray:
    """Per replica, the elementwise least of two ticks in a row from ``since`` up to ``until``: what a rule must see
    twice."""
    seqs: dict[str, list[tuple[float, list[float]]]] = defaultdict(list)
    samples = _samples(rec) if set(which) & set(SAMPLE_FEATURES) else {}
    for x in rec.readings:
        if since <= x.t <= until:
            f = features(x.reading)
            if samples:
                now = samples.get((x.replica, x.t))
                if now is not None:
                    f |= sample_features(now, samples.get((x.replica, x.t - RATE_WINDOW_S)))
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
        if not keep or not bool(np.any(np.all(a[keep] >= a[i], axis=1))):
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
    added, _ = _greedy(needs, budget)
    warned = sum(w for _, w in quiet)
    top = caught + added
    return [
        f"features {','.join(which)}: default {caught}/{preempting} caught, {warned}/{len(quiet)} quiet warned; a "
        f"monotone rule could add at most {added} within <= {QUIET_GOAL:.0%} quiet: ceiling {top}/{preempting} "
        f"({top / max(preempting, 1):.0%})"
    ]


def _fronts(quiet: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every quiet episode's front stacked, and the episode each row is from."""
    rows = [q for q in quiet if q.size]
    ids = [i for i, q in enumerate(quiet) if q.size for _ in range(len(q))]
    return (np.vstack(rows), np.array(ids)) if rows else (np.zeros((0, 0)), np.zeros(0, dtype=int))


def _needs(points: np.ndarray, fronts: tuple[np.ndarray, np.ndarray]) -> frozenset[int] | None:
    """The fewest quiet episodes a monotone rule must also warn to warn one of ``points`` (None: no point)."""
    stacked, ids = fronts
    best: frozenset[int] | None = None
    for v in points:
        must = frozenset(ids[np.all(stacked >= v, axis=1)].tolist()) if len(ids) else frozenset()
        if best is None or len(must) < len(best):
            best = must
    return best


def _greedy(needs: Sequence[frozenset[int]], budget: int) -> tuple[int, int]:
    """How many of the episodes (each needing its set of quiet episodes warned too) fit within ``budget`` quiet
    episodes, taking the cheapest next one first; and the quiet episodes that costs."""
    left, chosen, taken = list(needs), set[int](), 0
    while left:
        left.sort(key=lambda need: len(need - chosen))
        if len(chosen | left[0]) > budget:
            break
        chosen |= left.pop(0)
        taken += 1
    return taken, len(chosen)


# ``--causes`` reads no tick in an episode's first minute: every episode starts from an empty pool that fills at
# once (the bench's artefact, not a fleet's), and a rule that reads it would have to warn on every start.
SETTLE_S = 60.0

CAUSES = (
    "caught >= 60 s ahead by the default",
    "sudden: the load rose < 70 s before",
    "(i) nothing departs within the budget",
    "(ii) only signals the reading leaves out depart",
    "(iii) a signal the reading has departs",
)


def causes(recorded: Sequence[Recorded]) -> list[str]:
    """Every preempting episode by why the default does not warn it >= 60 s ahead (the module's docstring), per
    trace and shape; then how many any monotone rule on the six readings, and on every signal, could warn
    together within <= 20 % quiet (from nothing, not on top of the default); and the sudden ones by their delay."""
    both = (READ_FEATURES, FEATURES)
    quiet: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    preempting: list[tuple[Recorded, bool]] = []
    for rec in recorded:
        ep = rec.episode
        if not ep.usable:
            continue
        if ep.first_preempt_s is None:
            for side, which in zip(quiet, both, strict=True):
                side.append(_pairs(rec, which, since=SETTLE_S))
            continue
        warned = first_warning(rec, default_judge)
        preempting.append((rec, warned is not None and ep.first_preempt_s - warned >= LEAD_S))
    budget = math.floor(QUIET_GOAL * len(quiet[0]))
    fronts = [_fronts(q) for q in quiet]
    counts: dict[str, Counter[str]] = {c: Counter() for c in CAUSES}
    needs: tuple[list[frozenset[int]], list[frozenset[int]]] = ([], [])
    strict = Counter[str]()
    delays = Counter[str]()
    for rec, caught in preempting:
        ep = rec.episode
        first = ep.first_preempt_s
        assert first is not None
        must = [_needs(_pairs(rec, which, first - LEAD_S, SETTLE_S), f) for which, f in zip(both, fronts, strict=True)]
        for side, need in zip(needs, must, strict=True):
            if need is not None:
                side.append(need)
        fits = [need is not None and len(need) <= budget for need in must]
        strict.update(name for name, need in zip(("read", "all"), must, strict=True) if need is not None and not need)
        if caught:
            cause = CAUSES[0]
        elif ep.sudden(LEAD_S):
            cause = CAUSES[1]
        elif not fits[1]:
            cause = CAUSES[2]
        elif not fits[0]:
            cause = CAUSES[3]
        else:
            cause = CAUSES[4]
        counts[cause].update(("all", ep.trace, ep.family))
        if ep.sudden(LEAD_S):
            late = first - ep.rise_s
            delays["< 0 s (before its rise)" if late < 0 else "< 60 s" if late < LEAD_S else "60-70 s"] += 1
    columns = ["all", *sorted({ep for c in counts.values() for ep in c} - {"all"})]
    lines = [
        f"{len(preempting)} preempting, {len(quiet[0])} quiet (budget: {budget} quiet warned); "
        f"by cause: {' / '.join(columns)}"
    ]
    lines += [f"{' / '.join(str(counts[c][k]) for k in columns)}  {c}" for c in CAUSES]
    for name, side in zip(("the six readings", "every signal"), needs, strict=True):
        taken, cost = _greedy(side, budget)
        lines.append(
            f"a monotone rule on {name} could warn at most {taken}/{len(preempting)} "
            f"({taken / max(len(preempting), 1):.0%}) >= {LEAD_S:g} s ahead at {cost}/{len(quiet[0])} quiet "
            "(greedy, in-sample)"
        )
    lines.append(
        f"departing from every quiet episode (no quiet point as bad): {strict['read']} on the readings, "
        f"{strict['all']} on every signal"
    )
    lines.append("sudden, first preemption after the rise: " + ", ".join(f"{k} {v}" for k, v in sorted(delays.items())))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, required=True, help="the KV episodes (bench.kv_episodes.library)")
    parser.add_argument("--seeds", required=True, help="comma-separated seeds")
    parser.add_argument("--recordings", type=Path, help="keep each seed's recorded readings here (rec-SEED.pkl)")
    parser.add_argument("--features", default="rho,rise,peak", help=f"for the ceiling, among {','.join(FEATURES)}")
    parser.add_argument("--causes", action="store_true", help="also class the default's misses by why (docstring)")
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
    for line in [*classify(recorded), *ceiling(recorded, which), *(causes(recorded) if args.causes else [])]:
        print(line)


if __name__ == "__main__":
    main()
