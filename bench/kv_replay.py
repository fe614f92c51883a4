"""Every tick's KV reading of the labelled episodes, recorded once, so a change to ``kv_exhaustion.judge`` is scored
in seconds instead of a bench run (issue 16).

``record`` replays an episode as bench/detectors.py's kvpilot warner does (the planner's demand, ``DemandTrend``, the
real hysteresis) and keeps every replica's full ``KvReading`` at every tick: the longer trend and the replica's own
arrivals' rise worked out always, not only where ``judge`` reads them. ``first_warning`` then replays any judge over
the readings with the hysteresis' opening (a replica bad for ``open_after_ticks`` ticks in a row); for today's
``judge`` it gives the bench's first warnings exactly (``--check``). A judge that needs more than the reading (the
replica's samples, the deployment's demand series) reads them from ``Recorded.episode``.

Run: `.venv/bin/python bench/kv_replay.py --cache-dir DIR --seeds 1,2 [--check] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

# Run as `python bench/kv_replay.py`, this file's folder comes first on sys.path and bench/detectors.py would shadow
# the `detectors` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.detectors import KvScore, _Kvpilot, _state  # noqa: E402
from bench.kv_episodes import Episode, library  # noqa: E402
from collector.state import FleetState, ReplicaView  # noqa: E402
from detectors import kv_exhaustion  # noqa: E402
from detectors._values import finite  # noqa: E402
from detectors.kv_trend import KvTrends  # noqa: E402
from detectors.thresholds import DEFAULT, KvThresholds  # noqa: E402

Judge = Callable[[kv_exhaustion.KvReading], bool]


@dataclass(frozen=True, slots=True)
class Reading:
    t: float
    replica: str
    reading: kv_exhaustion.KvReading


@dataclass
class Recorded:
    episode: Episode
    readings: list[Reading]
    kvpilot_first: float | None  # the real detector's first warning in the same replay


def default_judge(r: kv_exhaustion.KvReading, kv: KvThresholds = DEFAULT.kv) -> bool:
    return kv_exhaustion.judge(r, kv) is not None


def _full_reading(
    view: ReplicaView,
    state: FleetState,
    th: KvThresholds,
    demand: kv_exhaustion.Demand | None,
    ready_replicas: int,
    trends: KvTrends,
) -> kv_exhaustion.KvReading | None:
    """The reading ``_replica_finding`` judges last, worked out at every tick."""
    latest_t = view.sample.timestamp
    since = latest_t - max(th.trend_window_s, state.rate_window_s, th.confirm_window_s)
    history = state.replica_history(view.key) if th.burst_margin > 0 else state.replica_history_since(view.key, since)
    r = kv_exhaustion.read(view, history, th, state.rate_window_s, demand, ready_replicas, confirm=False, trends=trends)
    if r is None:
        return None
    confirm = kv_exhaustion.time_to_exhaustion_s(history, th, th.confirm_window_s, trends=trends)
    cap = None if demand is None else finite(demand.capacity_rps)
    rise = None
    if cap is not None and cap > 0:
        rates = kv_exhaustion.arrival_rates(history, state.rate_window_s, th.trend_window_s)
        slope = kv_exhaustion._theil_sen_slope(rates, th.min_trend_samples)
        rise = None if slope is None else slope * 60.0 / cap
    return replace(r, confirm_time_to_exhaustion_s=confirm, arrivals_rise=rise)


@contextmanager
def _recording(out: list[Reading]) -> Iterator[None]:
    # The detector works out the longer trend and the arrivals' rise only where judge reads them; the recording
    # needs them at every tick, so it wraps the per-replica step (and leaves the detector's own result alone).
    original = kv_exhaustion._replica_finding

    def wrapper(
        view: ReplicaView,
        state: FleetState,
        th: KvThresholds,
        now: float,
        demand: kv_exhaustion.Demand | None,
        ready_replicas: int,
        trends: KvTrends,
    ) -> object:
        reading = _full_reading(view, state, th, demand, ready_replicas, trends)
        if reading is not None:
            out.append(Reading(now, view.sample.replica, reading))
        return original(view, state, th, now, demand, ready_replicas, trends)

    kv_exhaustion._replica_finding = wrapper  # type: ignore[assignment]
    try:
        yield
    finally:
        kv_exhaustion._replica_finding = original


def record(episode: Episode) -> Recorded:
    readings: list[Reading] = []
    state, warner = _state(), _Kvpilot(episode)
    first: float | None = None
    with _recording(readings):
        for t, reps in episode.ticks:
            state.observe(reps, [], now=t, gpu_nodes_scraped=set())
            if warner.tick(state, t) and first is None:
                first = t
    return Recorded(episode, readings, first)


def first_warning(rec: Recorded, judge: Judge, open_after_ticks: int | None = None) -> float | None:
    """The first tick at which some replica has been bad by ``judge`` for ``open_after_ticks`` ticks in a row (the
    kv_exhaustion hysteresis' by default), or None."""
    need = DEFAULT.policy(kv_exhaustion.KIND).open_after_ticks if open_after_ticks is None else open_after_ticks
    streak: dict[str, int] = {}
    t_prev: float | None = None
    bad: set[str] = set()
    for reading in [*rec.readings, None]:
        if reading is None or reading.t != t_prev:
            if t_prev is not None:
                for replica in streak.keys() - bad:
                    streak[replica] = 0
                for replica in bad:
                    streak[replica] = streak.get(replica, 0) + 1
                    if streak[replica] >= need:
                        return t_prev
            if reading is None:
                break
            t_prev, bad = reading.t, set()
        if judge(reading.reading):
            bad.add(reading.replica)
    return None


def score(recorded: Sequence[Recorded], judge: Judge) -> KvScore:
    """bench/detectors.py's episode-level score for ``judge``."""
    sc = KvScore()
    for rec in recorded:
        ep = rec.episode
        if not ep.usable:
            continue
        sc.add(ep, first_warning(rec, judge))
    return sc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, required=True, help="the KV episodes (bench.kv_episodes.library)")
    parser.add_argument("--seeds", required=True, help="comma-separated seeds")
    parser.add_argument("--out", type=Path, help="keep the recordings here (a pickle of list[Recorded])")
    parser.add_argument(
        "--check", action="store_true", help="fail unless the replay of judge gives the bench's warnings"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    recorded = [record(ep) for ep in library(seeds, cache_dir=args.cache_dir)]
    if args.out is not None:
        args.out.write_bytes(pickle.dumps(recorded))
    print(f"kvpilot (replayed judge) {score(recorded, default_judge).line()}")
    if args.check:
        wrong = [r for r in recorded if first_warning(r, default_judge) != r.kvpilot_first]
        print(f"replay vs detector: {len(recorded) - len(wrong)}/{len(recorded)} episodes agree")
        if wrong:
            sys.exit(1)


if __name__ == "__main__":
    main()
