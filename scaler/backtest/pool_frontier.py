"""The cost/SLO frontier of a disaggregated deployment: the fewest dollars with which any scaler could reach each
SLO attainment with a prefill pool and a decode pool, each on its own GPU type.

The oracle knows every arrival and plans under the same simulator (`simulator.disagg`), cold starts, routing and
replica ceilings as the policies. A schedule is a pair: the replicas held per ``WINDOW_S`` window in each pool
(set at the window's first decision tick, from the first decision a policy could make), each pool paying for
every replica it holds, loading and draining included, at its GPU type's price. The search is the co-located
one (`scaler.backtest.frontier`: constant fleets, per-window sizing on their replays, Lagrangian descents), run on
one pool at a time with the other's schedule fixed, each pool's replica-hours then being its dollars:

1. decode held at an ample constant (the smallest count past which, with prefill sized for the trace's busiest
   minute, more decode replicas buy under a twentieth of a point), prefill's schedule searched;
2. for each of prefill's envelope schedules (at most ``MOST_REFINED``, the highest attainment first, each cheaper
   than the one before it), decode's schedule searched with that prefill schedule fixed;
3. once more: prefill searched again with decode fixed at the schedule of the cheapest pair found so far at the
   highest attainment reached.

Every pair on every pool's envelope is replayed whole by the caller's ``replay`` (the policies' loop and measure)
and the frontier is the lower convex envelope, in dollars, of all those replays. Seeds are constant fleets and
what their replays show: no policy's schedule. Not provably optimal, so the bound is tested: every policy on a
slice of each shared trace (tests/unit/scaler/test_pool_frontier.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scaler.backtest.frontier import WINDOW_S, Frontier, FrontierPoint, envelope
from scaler.backtest.frontier import frontier as one_pool_frontier

POOLS = ("prefill", "decode")
MOST_REFINED = 2  # prefill envelope schedules whose decode schedule is searched (highest attainment first)
FLAT_GAIN = 5e-4  # a twentieth of a point: more decode replicas that buy less are not needed


@dataclass(frozen=True)
class PoolRun:
    """One whole replay of a pair of schedules, measured as the policies are."""

    held: dict[str, tuple[int, ...]]
    slo_attainment: float
    cost_usd: float
    replica_hours: dict[str, float]

    def to_json(self) -> dict[str, object]:
        return {
            "slo_attainment": round(self.slo_attainment, 6),
            "cost_usd": round(self.cost_usd, 4),
            "replica_hours": {k: round(v, 4) for k, v in self.replica_hours.items()},
        }


@dataclass(frozen=True)
class PoolFrontier:
    """The lower envelope, in dollars, of every pair of schedules replayed whole."""

    runs: tuple[PoolRun, ...]  # on the envelope: attainment rising, dollars rising

    @property
    def dollars(self) -> Frontier:
        """The envelope as a `Frontier` whose ``replica_hours`` are dollars (its interpolation and ratio)."""
        return Frontier(tuple(FrontierPoint(r.slo_attainment, r.cost_usd, math.nan) for r in self.runs))

    def cost_at(self, attainment: float) -> float | None:
        return self.dollars.replica_hours_at(attainment)

    def ratio(self, attainment: float, cost_usd: float) -> float | None:
        """A policy's dollars over the frontier's at the policy's own attainment (None above the frontier's
        highest attainment)."""
        return self.dollars.ratio(attainment, cost_usd)


class OnePool:
    """A disaggregated fleet as `scaler.backtest.replay.Replayer` sees one fleet: ``set_replicas`` sizes the
    searched pool and the other pool takes its fixed schedule's count for the same window; the replicas counted
    are the searched pool's."""

    def __init__(self, fleet: Any, pool: str, other: Sequence[int], window_s: float = WINDOW_S) -> None:
        self.fleet, self.pool, self.other, self.window_s = fleet, pool, tuple(other), window_s

    @property
    def _own(self) -> Any:
        return self.fleet.prefill if self.pool == "prefill" else self.fleet.decode

    def advance_to(self, t: float) -> None:
        self.fleet.advance_to(t)

    def snapshot(self) -> Any:
        return self._own.snapshot()

    def replica_count(self) -> int:
        """The searched pool's replicas, as ``len(self.snapshot().replicas)`` counts them (a pool is a request-level
        fleet, whose snapshot lists every replica it holds)."""
        return len(self._own.replicas)

    def set_replicas(self, n: int) -> None:
        w = min(int(self.fleet.time // self.window_s + 1e-9), len(self.other) - 1)
        other = "decode" if self.pool == "prefill" else "prefill"
        self.fleet.set_replicas(**{self.pool: n, other: self.other[w]})

    def finished(self) -> Any:
        return self.fleet.finished()

    def in_flight(self) -> Any:
        return self.fleet.in_flight()

    def fork(self) -> OnePool:
        """A deep copy sharing the read-only trace columns, with no finished requests of its own (the replay
        keeps the ones before the fork)."""
        memo: dict[int, object] = {}
        for p in (self.fleet.prefill, self.fleet.decode):
            for x in (p.trace, p._arrivals, p._prompts, p._outputs, p._blocks):
                memo[id(x)] = x
            memo[id(p._finished)] = []
        twin = copy.deepcopy(self.fleet, memo)
        twin._prefilled = 0  # the prefill pool's finished list starts empty too
        return OnePool(twin, self.pool, self.other, self.window_s)


def to_refine(
    runs: Sequence[PoolRun], prefills: Sequence[tuple[int, ...]], decode: tuple[int, ...], most: int = MOST_REFINED
) -> list[tuple[int, ...]]:
    """Prefill's envelope schedules (replayed with ``decode``) whose decode schedule is searched: the highest
    attainment first, each cheaper than every one taken before it. One that reaches no more than a cheaper one is
    dominated (the one-pool envelope keeps a dearer schedule at an equal attainment), and refining it would spend
    one of the ``most`` searches where the frontier cannot move."""
    by_held = {r.held["prefill"]: r for r in runs if r.held["decode"] == decode}
    ranked = sorted(
        {p for p in prefills if p in by_held}, key=lambda p: (-by_held[p].slo_attainment, by_held[p].cost_usd)
    )
    out: list[tuple[int, ...]] = []
    for p in ranked:
        if len(out) == most:
            break
        if not out or by_held[p].cost_usd < by_held[out[-1]].cost_usd:
            out.append(p)
    return out


def pool_frontier(
    trace: Any,
    make_fleet: Callable[[int, int], Any],
    replay: Callable[[Sequence[int], Sequence[int]], PoolRun],
    *,
    initial: tuple[int, int],
    slo_s: float,
    cold_start_s: tuple[float, float],
    bounds: tuple[tuple[int, int], tuple[int, int]],
    busiest: int,
    tick_s: float,
    warmup_s: float,
    most_prices: int = 3,
    progress: Callable[[str], None] | None = None,
) -> PoolFrontier:
    """The two-pool frontier for this trace. ``make_fleet(prefill, decode)`` builds the fleet at start;
    ``replay(prefill held, decode held)`` replays a pair whole; ``busiest``: prefill replicas for the trace's
    busiest minute (the ample prefill with which decode's ample constant is found); ``bounds``: (min, max)
    replicas of prefill, then decode."""
    n_windows = max(1, math.ceil(float(trace.duration_s) / WINDOW_S))
    runs: list[PoolRun] = []

    def say(what: str) -> None:
        if progress is not None:
            progress(what)

    def search(pool: str, other: Sequence[int]) -> list[tuple[int, ...]]:
        """The searched pool's envelope schedules with ``other`` fixed; every one replayed whole as a pair."""
        i = POOLS.index(pool)
        found: list[tuple[int, ...]] = []

        def make(n: int) -> OnePool:
            counts = (n, initial[1]) if pool == "prefill" else (initial[0], n)
            return OnePool(make_fleet(*counts), pool, other)

        def measure(held: list[int]) -> tuple[float, float]:
            pair = (held, list(other)) if pool == "prefill" else (list(other), held)
            run = replay(*pair)
            runs.append(run)
            found.append(tuple(held))
            return run.slo_attainment, run.replica_hours[pool]

        one_pool_frontier(
            trace,
            make,
            measure,
            initial=initial[i],
            slo_s=slo_s,
            fidelity="request",
            min_replicas=bounds[i][0],
            max_replicas=bounds[i][1],
            cold_start_s=cold_start_s[i],
            tick_s=tick_s,
            warmup_s=warmup_s,
            most_prices=most_prices,
        )
        return found

    # 1. decode's ample constant, with prefill at the busiest minute's count
    lo, hi = bounds[1]
    ample_prefill = [min(max(busiest, bounds[0][0]), bounds[0][1])] * n_windows
    ample, best = lo, -1.0
    for d in range(lo, hi + 1):
        run = replay(ample_prefill, [d] * n_windows)
        runs.append(run)
        if run.slo_attainment - best < FLAT_GAIN and d > lo:
            break
        ample, best = d, max(best, run.slo_attainment)
    say(f"decode ample at {ample}")
    # Past its ample constant decode buys nothing (measured above), so its search stops a little past it rather
    # than doubling to the ceiling through counts that buy nothing.
    bounds = (bounds[0], (lo, min(hi, max(2 * ample, ample + 2))))
    decode_fixed = [ample] * n_windows
    prefills = search("prefill", decode_fixed)
    say(f"prefill searched: {len(prefills)} envelope schedules")
    # 2. decode refined under the best prefill schedules
    top = to_refine(runs, prefills, tuple(decode_fixed))
    for p in top:
        search("decode", p)
    say(f"decode searched under {len(top)} prefill schedules")
    # 3. prefill again, decode fixed at the cheapest pair's at the highest attainment reached
    peak = max(r.slo_attainment for r in runs)
    cheapest = min((r for r in runs if r.slo_attainment >= peak - FLAT_GAIN), key=lambda r: r.cost_usd)
    if cheapest.held["decode"] != tuple(decode_fixed):
        search("prefill", cheapest.held["decode"])
        say("prefill searched again")
    points = envelope([FrontierPoint(r.slo_attainment, r.cost_usd, float(i)) for i, r in enumerate(runs)])
    kept: list[PoolRun] = []
    for point in points:  # of equal attainments the cheapest
        if not kept or point.slo_attainment > kept[-1].slo_attainment + 1e-12:
            kept.append(runs[int(point.price)])
    return PoolFrontier(tuple(kept))
