"""The cost/SLO frontier: the fewest replica-hours with which *any* scaler could reach each SLO attainment on this
trace, fleet, routing and cold start — the bound every policy is measured against.

The oracle knows every future arrival. It chooses a ready replica count per window of ``WINDOW_S`` seconds and
orders each replica one cold start ahead, so a window's replicas are serving when it begins; it pays for every
replica it holds, loading included, exactly as a policy pays. To choose, it replays the trace on the simulator
itself: at each window it forks the fleet (same queues, caches and in-flight requests) and tries replica counts,
scoring each by ``count · window + λ · requests that arrive in the window and miss the SLO``. For one price λ
(replica-seconds per missed request) this is the Lagrangian relaxation of "fewest replica-seconds for at most
so many misses"; sweeping λ traces the frontier. Every schedule found is then verified by a full replay under
the real cold start, measured as the policies are, and the frontier is the lower envelope of those replays.

A schedule chosen window by window with the state carried forward is not provably optimal, so the bound is
checked, not assumed: a test runs every policy on every shared trace and asserts that none lands below it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WINDOW_S = 60.0
LOOKAHEAD_S = 30.0
# Replica-seconds one missed request is worth (the Lagrangian rule), and shares of a window's arrivals allowed to
# miss (the per-window rule): together they span "any miss is cheap" to "the fewest misses the fleet allows".
PRICES = (0.0, 3.0, 30.0, 300.0)
SHARES = (0.1, 0.03, 0.01, 0.003, 0.0)
TARGETS = (0.95, 0.98, 0.99, 0.995, 0.999)


@dataclass(frozen=True)
class FrontierPoint:
    slo_attainment: float
    replica_hours: float
    price: float  # λ that produced it (≥ 0), or minus the per-window miss share (≤ 0)

    def to_json(self) -> dict[str, float]:
        return {"slo_attainment": round(self.slo_attainment, 6), "replica_hours": round(self.replica_hours, 4)}


@dataclass(frozen=True)
class Frontier:
    points: tuple[FrontierPoint, ...]  # lower envelope: attainment rising, replica-hours rising

    def replica_hours_at(self, attainment: float) -> float | None:
        """The frontier's replica-hours at ``attainment``, linearly interpolated between verified schedules
        (their mixtures are schedules too); None above the highest attainment any schedule reached."""
        pts = self.points
        if not pts or attainment > pts[-1].slo_attainment + 1e-12:
            return None
        if attainment <= pts[0].slo_attainment:
            return pts[0].replica_hours
        for lo, hi in itertools.pairwise(pts):
            if lo.slo_attainment <= attainment <= hi.slo_attainment:
                span = hi.slo_attainment - lo.slo_attainment
                share = 0.0 if span <= 0 else (attainment - lo.slo_attainment) / span
                return lo.replica_hours + share * (hi.replica_hours - lo.replica_hours)
        return pts[-1].replica_hours

    def ratio(self, attainment: float, replica_hours: float) -> float | None:
        """A policy's replica-hours over the frontier's at the policy's own attainment."""
        bound = self.replica_hours_at(attainment)
        if bound is None or bound <= 0:
            return None
        return replica_hours / bound

    def to_json(self) -> list[dict[str, float | None]]:
        out: list[dict[str, float | None]] = []
        for target in TARGETS:
            hours = self.replica_hours_at(target)
            out.append(
                {"slo_target": target, "slo_attainment": target if hours is not None else None, "replica_hours": hours}
            )
        return out


def envelope(points: Sequence[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The lower convex envelope of (attainment, replica-hours): dominated points and points above a chord
    between two others go (a mixture of two schedules reaches the chord)."""
    pts = sorted(points, key=lambda p: (p.slo_attainment, p.replica_hours))
    pareto: list[FrontierPoint] = []
    for p in reversed(pts):  # keep, from the highest attainment down, points cheaper than all above them
        if not pareto or p.replica_hours < pareto[-1].replica_hours:
            pareto.append(p)
    pareto.reverse()
    hull: list[FrontierPoint] = []
    for p in pareto:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (b.slo_attainment - a.slo_attainment) * (p.replica_hours - a.replica_hours) - (
                b.replica_hours - a.replica_hours
            ) * (p.slo_attainment - a.slo_attainment)
            if cross <= 0:  # b lies on or above the chord a–p
                hull.pop()
            else:
                break
        hull.append(p)
    return tuple(hull)


class _Scorer:
    """Misses among one window's arrivals, replayed on a fork of the fleet with ``n`` replicas serving."""

    def __init__(self, trace: Any, slo_s: float, fidelity: str) -> None:
        self.slo_s = slo_s
        self.fluid = fidelity == "fluid"
        self.arrivals = None if self.fluid else np.asarray(trace.columns.arrival_s, dtype=float)

    def misses(self, fleet: Any, n: int, start: float, end: float) -> tuple[float, float]:
        """(misses, arrivals) among arrivals of [start, end + LOOKAHEAD_S): the look past the window charges a
        count for the backlog it leaves the next window (a myopic choice under-provisions, then pays to catch up)."""
        end = end + LOOKAHEAD_S
        trial = fleet.fork()
        trial.set_replicas(n)
        if self.fluid:
            trial.advance_to(end)
            values, weights = trial.ttft_samples()  # this fork's own records: the window's arrivals
            if not len(values):
                return 0.0, 0.0
            return float(np.sum(weights[values > self.slo_s])), float(np.sum(weights))
        assert self.arrivals is not None
        trial.advance_to(end + 2 * self.slo_s)
        arrived = int(np.count_nonzero((self.arrivals >= start) & (self.arrivals < end)))
        done = sum(1 for f in trial.finished() if start <= f.arrival_s < end and f.ttft_s <= self.slo_s)
        running = sum(
            1 for a, ttft in trial.in_flight() if start <= a < end and ttft is not None and ttft <= self.slo_s
        )
        return float(arrived - done - running), float(arrived)


def schedule(
    trace: Any,
    fleet: Any,
    *,
    slo_s: float,
    fidelity: str,
    min_replicas: int,
    max_replicas: int,
    price: float | None = None,
    share: float | None = None,
    fixed: tuple[float, int] = (0.0, 0),
    window_s: float = WINDOW_S,
) -> list[int]:
    """Ready replicas per window, chosen on ``fleet`` (forked with instant readiness; the caller orders them one
    cold start ahead when it replays the schedule), by one of two rules:

    - ``price`` λ: the count with the least ``count · window + λ · misses`` (the Lagrangian form: cheap where a
      miss is cheap to avoid, giving up a burst that would cost more than its misses are worth);
    - ``share`` ε: the fewest replicas whose misses stay within ε of the window's arrivals above the fewest misses
      the window allows at all (every window kept healthy: no backlog cascades into the next).

    ``fixed`` = (until_s, count): windows that begin before until_s can hold at most the count the fleet started
    with (no replica ordered at the first decision can serve them), fewer if that is cheaper."""
    if (price is None) == (share is None):
        raise ValueError("frontier schedule: give exactly one of price and share")
    scorer = _Scorer(trace, slo_s, fidelity)
    line = fleet.fork(cold_start_s=0.0)
    out: list[int] = []
    n_windows = max(1, math.ceil(trace.duration_s / window_s))
    previous = max(min_replicas, 1)
    for w in range(n_windows):
        start, end = w * window_s, min((w + 1) * window_s, trace.duration_s)
        cache: dict[int, tuple[float, float]] = {}

        def scored(
            n: int, start: float = start, end: float = end, cache: dict[int, tuple[float, float]] = cache
        ) -> tuple[float, float]:
            if n not in cache:
                cache[n] = scorer.misses(line, n, start, end)
            return cache[n]

        # Before the first ordered replica can be ready, only fewer replicas than the start are possible.
        ceiling = min(fixed[1], max_replicas) if start < fixed[0] else max_replicas
        floor = min(max(min_replicas, 0), ceiling)
        if price is not None:
            n = _argmin(lambda k: scored(k)[0], price=price, width=end - start, lo=floor, hi=ceiling, guess=previous)
        else:
            n = _fewest_within(scored, share=share or 0.0, lo=floor, hi=ceiling, guess=previous)
        out.append(n)
        previous = max(n, 1)
        line.set_replicas(n)
        line.advance_to(end)
    return out


def _fewest_within(scored: Callable[[int], tuple[float, float]], *, share: float, lo: int, hi: int, guess: int) -> int:
    """Fewest replicas whose misses are within ``share`` of the arrivals above the misses of a generous count
    (twice the last choice, at least four more): bisection, misses falling with replicas."""
    big = min(hi, max(2 * guess, guess + 4))
    while big < hi and scored(big)[0] > scored(min(hi, 2 * big))[0]:
        big = min(hi, 2 * big)  # still falling: the generous count was not generous enough
    least, arrived = scored(big)
    allowed = least + share * arrived + 1e-9
    a, b = lo, big  # invariant: b meets the bound
    if scored(a)[0] <= allowed:
        return a
    while b - a > 1:
        mid = (a + b) // 2
        if scored(mid)[0] <= allowed:
            b = mid
        else:
            a = mid
    return b


def _argmin(misses: Callable[[int], float], *, price: float, width: float, lo: int, hi: int, guess: int) -> int:
    """The replica count with the least ``n · width + price · misses(n)``. Misses fall with replicas but not
    smoothly (a plateau while a burst's backlog outlasts the window, then a drop), so a local walk can stop
    short: scan lo, lo+1, lo+2, lo+4, … (and the last window's choice and its neighbours) until misses reach
    zero, stop falling over two doublings, or the replicas alone cost more than the best so far; then refine
    between the best point's scanned neighbours by bisection on the forward difference."""

    def cost(n: int) -> float:
        return n * width + price * misses(n)

    if price <= 0:
        return lo
    guess = min(max(guess, lo), hi)
    scanned = {n for n in (guess - 1, guess, guess + 1) if lo <= n <= hi}
    best_cost = min(cost(n) for n in scanned)
    n, step, flat, previous = lo, 1, 0, None
    while n <= hi and n * width < best_cost:
        scanned.add(n)
        m = misses(n)
        best_cost = min(best_cost, cost(n))
        if m <= 0:
            break
        flat = flat + 1 if previous is not None and m >= previous else 0
        if flat >= 2:
            break
        previous, n, step = m, n + step, step * 2
    points = sorted(scanned)
    best = min(points, key=lambda k: (cost(k), k))
    i = points.index(best)
    for a, b in ((points[i - 1] if i > 0 else best, best), (best, points[i + 1] if i + 1 < len(points) else best)):
        while b - a > 1:
            mid = (a + b) // 2
            if cost(mid) < cost(best):
                best = mid
            if cost(mid + 1) < cost(mid):
                a = mid
            else:
                b = mid
    return best


def fleet_counts(ready: Sequence[int], cold_start_s: float, window_s: float = WINDOW_S) -> list[int]:
    """Replicas to hold per window so that each window's ready count is there when it begins: a window's count
    is ordered one cold start ahead and held until its window ends."""
    ahead = math.ceil(cold_start_s / window_s - 1e-9)
    return [max(ready[w : w + ahead + 1]) for w in range(len(ready))]


def frontier(
    trace: Any,
    make_fleet: Callable[[int], Any],
    replay: Callable[[list[int]], tuple[float, float]],
    *,
    initial: int,
    fixed_until_s: float,
    slo_s: float,
    fidelity: str,
    min_replicas: int,
    max_replicas: int,
    prices: Sequence[float] = PRICES,
    shares: Sequence[float] = SHARES,
    progress: Callable[[float], None] | None = None,
) -> Frontier:
    """The frontier for this trace: one schedule per price and per share, each verified by ``replay(ready counts
    per window)`` → (attainment, replica-hours) as the policies are measured; the lower envelope of them all."""
    rules: list[tuple[str, float]] = [("price", p) for p in prices] + [("share", e) for e in shares]
    points = []
    for i, (rule, value) in enumerate(rules):
        ready = schedule(
            trace,
            make_fleet(initial),
            fixed=(fixed_until_s, initial),
            slo_s=slo_s,
            fidelity=fidelity,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            **{rule: value},
        )
        attainment, hours = replay(ready)
        points.append(FrontierPoint(attainment, hours, value if rule == "price" else -value))
        if progress is not None:
            progress((i + 1) / len(rules))
    return Frontier(envelope(points))
