"""Fit the KV detector's fitted reading (``detectors.kv.rule: fitted``) and write its coefficients (issue 16).

A logistic regression of "this replica-tick lies within ``FITTED_HORIZON_S`` (180 s) of its episode's first
preemption" on ``kv_exhaustion.fitted_features`` of every tick's recorded ``KvReading`` (bench/kv_replay.py), over
the labelled episodes of bench/kv_episodes.py:

- positives: ticks of a preempting episode within (0, 180] s before its first preemption (a 120 s cold start plus
  the 60 s lead the goal asks for);
- negatives: every tick of an episode that never preempts;
- left out: ticks of a preempting episode more than 180 s ahead (a warning there counts as caught: neither class),
  ticks at or after the first preemption (the critical rules read measured exhaustion), sudden episodes (preempting
  within 60 s of the load's rise: by definition not warnable that far ahead) and episodes set aside as too early.

Features are standardised and the fit is sklearn's ``LogisticRegression`` (lbfgs, C = 1, balanced classes); the
standardisation is folded into the written coefficients, so the detector evaluates one fixed formula without numpy.
The probability threshold is chosen on the fitting episodes through the detector's own 2-tick hysteresis, with the
critical rules kept: the most preempting episodes warned >= 60 s ahead while at most ``--quiet-target`` (15 %) of
the quiet ones are warned at all; ties: the highest threshold.

``--cv``: leave-2-seeds-out cross-validation by seed pair; each held-out pair is scored through the real
``kv_exhaustion.judge`` (its fold's coefficients set in ``detectors.kv_fitted``) and ``kv_replay.first_warning``,
beside the default judge on the same episodes. ``--write``: fit on all the given seeds and write
detectors/kv_fitted.py.

Run: `nice .venv/bin/python bench/kv_fit.py --cache-dir DIR --seeds 1,2,3,4,7,8,11,12,15,16 [--cv] [--write]`.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.detectors import LEAD_S, KvScore  # noqa: E402
from bench.kv_episodes import Episode, library  # noqa: E402
from bench.kv_replay import Reading, Recorded, default_judge, first_warning, record  # noqa: E402
from detectors import kv_exhaustion, kv_fitted  # noqa: E402
from detectors.thresholds import DEFAULT  # noqa: E402

FEATURES = tuple(kv_fitted.COEFFICIENTS)
QUIET_TARGET = 0.18
C = 1.0
OUT = Path(__file__).resolve().parents[1] / "detectors" / "kv_fitted.py"
FITTED_KV = replace(DEFAULT.kv, rule="fitted")


@dataclass(frozen=True)
class Fit:
    intercept: float
    coefficients: dict[str, float]
    threshold: float


__all__ = ["Episode", "Reading", "Recorded", "fit", "render"]


def _label(rec: Recorded, t: float) -> int | None:
    """1 within the horizon before the first preemption, 0 in a quiet episode, None: left out of the fit."""
    ep = rec.episode
    first = ep.first_preempt_s
    if first is None:
        return 0
    if ep.sudden(LEAD_S) or t >= first or first - t > kv_exhaustion.FITTED_HORIZON_S:
        return None
    return 1


def dataset(recorded: Sequence[Recorded]) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) of every labelled replica-tick whose features are known."""
    rows: list[list[float]] = []
    labels: list[int] = []
    for rec in recorded:
        if not rec.episode.usable:
            continue
        for reading in rec.readings:
            y = _label(rec, reading.t)
            if y is None:
                continue
            x = kv_exhaustion.fitted_features(reading.reading, DEFAULT.kv)
            if x is None:
                continue
            rows.append([x[f] for f in FEATURES])
            labels.append(y)
    return np.array(rows, dtype=float).reshape(-1, len(FEATURES)), np.array(labels, dtype=int)


def fit_logistic(x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, float]]:
    """The logistic regression on standardised features, folded back to the raw features' scale."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=C, class_weight="balanced", max_iter=2000)
    model.fit((x - mean) / scale, y)
    w = model.coef_[0] / scale
    b = float(model.intercept_[0] - np.dot(w, mean))
    return b, {f: float(v) for f, v in zip(FEATURES, w, strict=True)}


@contextmanager
def coefficients(fit: Fit) -> Iterator[None]:
    """``detectors.kv_fitted`` holding ``fit`` for the duration (the real judge then reads it)."""
    saved = kv_fitted.INTERCEPT, dict(kv_fitted.COEFFICIENTS), kv_fitted.THRESHOLD
    kv_fitted.INTERCEPT, kv_fitted.THRESHOLD = fit.intercept, fit.threshold
    kv_fitted.COEFFICIENTS.clear()
    kv_fitted.COEFFICIENTS.update(fit.coefficients)
    try:
        yield
    finally:
        kv_fitted.INTERCEPT, kv_fitted.THRESHOLD = saved[0], saved[2]
        kv_fitted.COEFFICIENTS.clear()
        kv_fitted.COEFFICIENTS.update(saved[1])


def fitted_judge(r: kv_exhaustion.KvReading) -> bool:
    return kv_exhaustion.judge(r, FITTED_KV) is not None


def _scores(rec: Recorded) -> list[tuple[float, str, float]]:
    """(t, replica, score) per reading: inf where a critical rule fires, else the fitted probability (-inf unknown),
    under the coefficients in ``detectors.kv_fitted``; a reading is bad at threshold h iff its score >= h."""
    never = Fit(kv_fitted.INTERCEPT, dict(kv_fitted.COEFFICIENTS), math.inf)
    out = []
    with coefficients(never):
        for reading in rec.readings:
            r = reading.reading
            if kv_exhaustion.judge(r, FITTED_KV) is not None:
                out.append((reading.t, reading.replica, math.inf))
                continue
            x = kv_exhaustion.fitted_features(r, DEFAULT.kv)
            out.append((reading.t, reading.replica, -math.inf if x is None else kv_exhaustion.fitted_probability(x)))
    return out


def reach(rec: Recorded, need: int | None = None) -> float:
    """The highest threshold at which ``first_warning``'s hysteresis (a replica bad ``need`` ticks in a row) opens
    in time: anywhere for a quiet episode, at least LEAD_S before the first preemption for a preempting one (-inf:
    never). A reading is bad at threshold h iff its score (``_scores``) is >= h."""
    need = DEFAULT.policy(kv_exhaustion.KIND).open_after_ticks if need is None else need
    first = rec.episode.first_preempt_s
    last_t = math.inf if first is None else first - LEAD_S
    ticks: dict[float, dict[str, float]] = {}
    for t, replica, score in _scores(rec):
        ticks.setdefault(t, {})[replica] = score
    replicas = {rep for by in ticks.values() for rep in by}
    best = -math.inf
    window: dict[str, list[float]] = {rep: [] for rep in replicas}
    for t in sorted(ticks):
        if t > last_t:
            break
        for rep in replicas:
            w = window[rep]
            w.append(ticks[t].get(rep, -math.inf))
            if len(w) >= need:
                best = max(best, min(w[-need:]))
    return best


def choose_threshold(recorded: Sequence[Recorded], quiet_target: float) -> float:
    """The threshold warning the most preempting episodes >= LEAD_S ahead with at most ``quiet_target`` of the quiet
    ones warned; ties: the highest."""
    usable = [r for r in recorded if r.episode.usable]
    reaches = [(reach(r), r.episode.preempting) for r in usable]
    quiet_total = sum(not p for _, p in reaches)
    candidates = sorted({v for v, _ in reaches if math.isfinite(v)}, reverse=True)
    best_h, best_caught = 1.0, -1
    for h in candidates:
        quiet = sum(1 for v, p in reaches if not p and v >= h)
        if quiet > quiet_target * quiet_total:
            break
        caught = sum(1 for v, p in reaches if p and v >= h)
        if caught > best_caught:
            best_h, best_caught = h, caught
    lower = [v for v in candidates if v < best_h]
    return (best_h + lower[0]) / 2 if lower else best_h


def fit(recorded: Sequence[Recorded], quiet_target: float = QUIET_TARGET) -> Fit:
    x, y = dataset(recorded)
    b, w = fit_logistic(x, y)
    with coefficients(Fit(b, w, math.inf)):
        h = choose_threshold(recorded, quiet_target)
    return Fit(b, w, h)


def render(f: Fit, command: str, seeds: Sequence[int]) -> str:
    """detectors/kv_fitted.py for ``f`` (coefficients to 6 significant digits)."""
    head = (kv_fitted.__doc__ or "").strip()
    coefs = "".join(f'    "{k}": {float(f"{v:.6g}")!r},\n' for k, v in f.coefficients.items())
    return (
        f'"""{head}\n"""\n\nfrom __future__ import annotations\n\n'
        f"COMMAND = {json.dumps(command)}\n"
        f"SEEDS: tuple[int, ...] = {tuple(seeds)!r}\n"
        f"INTERCEPT = {float(f'{f.intercept:.6g}')!r}\n"
        f"COEFFICIENTS: dict[str, float] = {{\n{coefs}}}\n"
        f"THRESHOLD = {float(f'{f.threshold:.6g}')!r}\n"
    )


def recordings(seeds: Sequence[int], cache_dir: Path, rec_dir: Path | None) -> dict[int, list[Recorded]]:
    """Each seed's recorded readings (bench/kv_replay.py), kept in ``rec_dir`` when given."""
    out: dict[int, list[Recorded]] = {}
    for seed in seeds:
        path = None if rec_dir is None else rec_dir / f"rec-{seed}.pkl"
        if path is not None and path.exists():
            out[seed] = pickle.loads(path.read_bytes())
            continue
        out[seed] = [record(ep) for ep in library([seed], cache_dir=cache_dir)]
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(out[seed]))
    return out


def held_out(recorded: Sequence[Recorded], f: Fit) -> tuple[KvScore, KvScore]:
    """(fitted, default) scored on ``recorded`` through the real judge and first_warning."""
    fitted, default = KvScore(), KvScore()
    with coefficients(f):
        for rec in recorded:
            if not rec.episode.usable:
                continue
            fitted.add(rec.episode, first_warning(rec, fitted_judge))
            default.add(rec.episode, first_warning(rec, default_judge))
    return fitted, default


def _brief(sc: KvScore) -> str:
    return (
        f"caught {sc.caught + sc.sudden_caught}/{sc.preempting + sc.sudden} (not sudden {sc.caught}/{sc.preempting}), "
        f"quiet warned {sc.false}/{sc.quiet} ({sc.false_rate:.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, required=True, help="the KV episodes (bench.kv_episodes.library)")
    parser.add_argument("--seeds", required=True, help="comma-separated seeds to fit on (pairs for --cv)")
    parser.add_argument("--recordings", type=Path, help="keep each seed's recorded readings here")
    parser.add_argument("--quiet-target", type=float, default=QUIET_TARGET)
    parser.add_argument("--cv", action="store_true", help="leave-2-seeds-out cross-validation by seed pair")
    parser.add_argument("--write", action="store_true", help=f"fit on all the seeds and write {OUT.name}")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    recs = recordings(seeds, args.cache_dir, args.recordings)
    if args.cv:
        pairs = [tuple(seeds[i : i + 2]) for i in range(0, len(seeds), 2)]
        total_f, total_d = KvScore(), KvScore()
        for pair in pairs:
            train = [r for s in seeds if s not in pair for r in recs[s]]
            test = [r for s in pair for r in recs[s]]
            f = fit(train, args.quiet_target)
            sf, sd = held_out(test, f)
            print(
                f"held out {pair}: threshold {f.threshold:.3f}; fitted {_brief(sf)}; default {_brief(sd)}", flush=True
            )
            for total, sc in ((total_f, sf), (total_d, sd)):
                for name in ("caught", "preempting", "false", "quiet", "sudden", "sudden_caught"):
                    setattr(total, name, getattr(total, name) + getattr(sc, name))
        print(f"held out, all folds: fitted {_brief(total_f)}; default {_brief(total_d)}")
    if args.write:
        f = fit([r for s in seeds for r in recs[s]], args.quiet_target)
        command = f"nice .venv/bin/python bench/kv_fit.py --cache-dir DIR --seeds {args.seeds} --write"
        OUT.write_text(render(f, command, seeds))
        print(f"wrote {OUT}: threshold {f.threshold:.4f}, intercept {f.intercept:.4g}")


if __name__ == "__main__":
    main()
