"""The cost/SLO frontier: the fewest replica-hours with which *any* scaler could reach each SLO attainment on this
trace, fleet, routing and cold start — the bound every policy is measured against.

The oracle knows every future arrival and plans under the same simulator, cold start and routing as the policies:
a schedule is the replica count held in each ``WINDOW_S`` window (set at the window's first tick, from the first
decision a policy could make on), and it pays for every replica it holds, loading and draining included. Every
schedule is measured by replaying it whole (`replay.py`, run_policy's loop and measure, checked equal), and the
frontier is the lower convex envelope of all schedules replayed, each envelope point re-verified by the caller's
replay. The search:

1. constant fleets from the floor up, past plateaus of misses, until more replicas stop buying attainment;
2. per price λ (replica-seconds per missed request), the ready count per window chosen among the constant fleets'
   sizes by their replays' misses in that window (the backlog and bursts those fleets really met), a rise paying
   its cold start (a dynamic program over windows), each window's count ordered a cold start ahead;
3. per price, a Lagrangian descent from the cheapest schedule so far for that price: last window first, one replica
   fewer from a window to the end of its plateau (at most two), else one more ordered there, each change taken if
   ``replica-seconds + λ × misses`` falls, tried on a fork of the replay at that window over the windows it can
   affect (exactly, to the end, when it reaches the end); the sweep's schedule is then replayed whole.

It is also seeded by every policy run in the same backtest (``seeds``): the oracle may replay any schedule, so each
policy's own one — the count it held after every tick's decision — is replayed whole, per tick (exactly the policy's
point: the same loop, ticks and decisions), and, held at its most per ``WINDOW_S`` window, as a schedule the
descents can start from: after the unseeded search has run unchanged, one more descent per price, the prices now
taken from the seeds' trade-offs too, so that seeds only ever add schedules. Every point of the frontier is still a
schedule the oracle replayed (never a policy's reported point), and the descents improve on the policies' schedules
where they can. Without its seeds the search missed schedules that follow a day's load (ServeGen afternoons:
constant fleets' per-window misses, backlog included, never priced a smaller fleet in), and policies landed below
it.

At the request level it is seeded last with need-ahead schedules built from the trace's own arrivals (``NEED_AHEAD``;
the oracle knows them): each tick, ⌈the highest service need of the next L s / (share × a replica's saturated
rate)⌉, the need being the least rate at which no arrival of a run of 1–6 ticks waits past the SLO. Each is
replayed whole per tick and held at its most per window, as a policy's seed is; they only add schedules (no descent
starts from them, so every earlier stage runs unchanged). Without them the frontier was no bound on Azure code ×4
above 99.3 %: ``bench/causal_holds.py``'s ``ahead:180:1`` reached 99.756 % at 0.88 of its replica-hours.
Not provably optimal, so the bound is tested: every registered policy on a slice of every shared trace, and the
need-ahead schedules on a slice where they beat the search without them (tests/unit/scaler/test_backtest_frontier.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scaler.backtest.replay import Local, Replayer, Run

WINDOW_S = 60.0
# Seeds sized per window on the constant fleets' replays, one per price; then Lagrangian descents, one per price,
# the prices spread over the trade-offs the schedules found so far make.
MOST_PRICED = 8
MOST_PRICES = 3
TOP_PRICE_FACTOR = 4.0
FLAT_CONSTANTS = 2  # constant fleets in a row that bought no attainment before the scan stops
MOST_DOWN = 2  # replicas one sweep may take away at one window
TARGETS = (0.95, 0.98, 0.99, 0.995, 0.999)
# Need-ahead schedules seeded from the trace's arrivals: (seconds of foresight, share of a replica's saturated rate).
NEED_AHEAD = ((120.0, 1.0), (180.0, 1.0), (180.0, 0.8), (300.0, 1.0), (300.0, 0.8))
NEED_RUN_TICKS = 6  # the service need is read over runs of 1..6 ticks ending at each tick


def service_need(arrivals_s: Sequence[float], ticks: int, tick_s: float, slo_s: float) -> np.ndarray:
    """Each tick's service need (requests/s): the highest ``A(d) / (d + slo_s)`` over runs of 1..``NEED_RUN_TICKS``
    ticks ending at its time, ``A(d)`` the arrivals in the run — the least rate at which none of them waits past
    the SLO."""
    counts = np.histogram(np.asarray(arrivals_s, dtype=float), bins=np.arange(ticks + 1) * tick_s)[0]
    before = np.concatenate([[0], np.cumsum(counts)]).astype(float)  # arrivals before each tick's time
    ends = np.arange(ticks)
    need = np.zeros(ticks)
    for k in range(1, NEED_RUN_TICKS + 1):
        need = np.maximum(need, (before[ends] - before[np.maximum(0, ends - k)]) / (k * tick_s + slo_s))
    return need


def need_ahead(need: np.ndarray, tick_s: float, ahead_s: float, rate: float) -> list[int]:
    """The count per tick that serves the highest need of the next ``ahead_s`` seconds at ``rate`` requests/s a
    replica (at least one; the last tick reads its own need)."""
    span = max(1, round(ahead_s / tick_s))
    out = []
    for i in range(len(need)):
        seg = need[i + 1 : i + 1 + span]
        top = float(seg.max()) if len(seg) else float(need[i])
        out.append(max(1, math.ceil(top / rate - 1e-9)))
    return out


@dataclass(frozen=True)
class FrontierPoint:
    slo_attainment: float
    replica_hours: float
    price: float  # λ of the descent that found it (replica-seconds per missed request); nan for a seed
    # Whose schedule it is: "search" (constant fleets, their per-window mixes and the descents, including those
    # started from a seed), or a seeding policy's own — "kvpilot" its count per tick exactly, "kvpilot, per 60 s"
    # held at its most per window. A policy whose own schedule is the frontier at its attainment has ratio 1 by
    # construction: the search found nothing cheaper there, which is not the same as beating a search.
    schedule: str = "search"

    def to_json(self) -> dict[str, float | str]:
        return {
            "slo_attainment": round(self.slo_attainment, 6),
            "replica_hours": round(self.replica_hours, 4),
            "schedule": self.schedule,
        }


@dataclass(frozen=True)
class Frontier:
    points: tuple[FrontierPoint, ...]  # lower envelope: attainment rising, replica-hours rising
    seeds: tuple[str, ...] = ()  # the policies whose schedules seeded the search

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
    # from the highest attainment down (the cheapest first at equal attainment), points cheaper than all above them
    pts = sorted(points, key=lambda p: (-p.slo_attainment, p.replica_hours))
    pareto: list[FrontierPoint] = []
    for p in pts:
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


def fleet_counts(ready: Sequence[int], cold_start_s: float, window_s: float = WINDOW_S) -> list[int]:
    """Replicas to hold per window so that each window's ready count is there when it begins: a window's count
    is ordered one cold start ahead and held until its window ends."""
    ahead = math.ceil(cold_start_s / window_s - 1e-9)
    return [max(ready[w : w + ahead + 1]) for w in range(len(ready))]


class _Search:
    """Schedules tried on the simulator, every one kept that a whole replay measured."""

    def __init__(self, rp: Replayer, *, cold_start_s: float, floor: int, ceiling: int) -> None:
        self.rp, self.floor, self.ceiling = rp, floor, ceiling
        self.ahead = math.ceil(cold_start_s / rp.window_s - 1e-9)
        # Windows a tried change is compared over past the last window it changes: a replica it takes away is
        # missed until one ordered a cold start later is ready, and the backlog takes a window to clear.
        self.past = self.ahead + 1
        self.found: list[_Found] = []  # every schedule replayed whole
        self.report: Callable[[float], None] = lambda share: None  # share of the running stage done

    def keep(self, run: Run, price: float, schedule: str = "search") -> Run:
        if run.exact:
            misses = float(run.window_misses.sum())
            self.found.append(
                _Found(run.held, run.attainment, run.replica_s, misses, price, self.rp.window_s, schedule)
            )
        return run

    def seeded(self, name: str, per_tick: Sequence[int], fine: Replayer) -> None:
        """A policy's schedule (its count after every tick's decision) replayed whole per tick on ``fine`` (one
        window a tick: exactly the policy's run), and held at its most per window here, for the descents."""
        rp = self.rp
        if len(per_tick) != len(rp.times):
            raise ValueError(f"a seed holds {len(per_tick)} counts; the replay has {len(rp.times)} ticks")
        held = [per_tick[fine.tick_of[w]] if w in fine.tick_of else fine.initial for w in range(fine.n_windows)]
        run = fine.run(held, save=False)
        self.found.append(
            _Found(run.held, run.attainment, run.replica_s, self.misses(run), math.nan, fine.window_s, name)
        )
        starts = [rp.tick_of[w] for w in rp.free] + [len(rp.times)]
        coarse = [rp.initial] * rp.n_windows
        for w, (i, j) in zip(rp.free, itertools.pairwise(starts), strict=True):
            coarse[w] = max(per_tick[i:j])
        if all(tuple(coarse) != f.held for f in self.found):
            self.keep(rp.run(coarse, save=False), math.nan, f"{name}, per {rp.window_s:g} s")

    def misses(self, run: Run) -> float:
        return float(run.window_misses.sum())

    def constants(self) -> list[Run]:
        """Constant fleets from the floor up, until more replicas stop buying attainment: misses can plateau (a
        burst's backlog outlasts every count until one is large enough, or every small fleet misses nearly
        all), so two counts in a row that buy under a twentieth of a point are followed by one at twice the
        size before the scan stops, and by doubling until some count buys attainment if none has yet."""
        out: list[Run] = []
        n, flat, best, bought = self.floor, 0, math.inf, False
        while n <= self.ceiling:
            run = self.keep(self.rp.run([n] * self.rp.n_windows, save=False), math.nan)
            out.append(run)
            self.report(1.0 - 1.0 / (len(out) + 1))  # the scan's length is not known ahead
            if run.attainment >= 1.0 - 1e-12:
                break
            gained = best - self.misses(run) >= 5e-4 * float(run.window_total.sum())
            best = min(best, self.misses(run))
            flat = 0 if gained else flat + 1
            bought = bought or (gained and len(out) > 1)
            if flat > FLAT_CONSTANTS and bought:
                break
            if flat >= FLAT_CONSTANTS:  # double: once past a plateau, and on until the first count that buys
                if run.held[-1] >= self.ceiling:
                    break
                n = min(self.ceiling, max(2 * n, n + 1))
                continue
            n = n + 1 if n < 8 else math.ceil(n * 1.25)
        return out

    def priced(self, constants: list[Run], prices: Sequence[float]) -> list[Run]:
        """Per price λ, the ready count per window chosen among the constant fleets' sizes by the least
        ``replicas × window + λ × the misses that fleet had in that window`` (its replay: the backlog and bursts
        it really met), a rise paying its cold start, each window's count ordered a cold start ahead."""
        out: list[Run] = []
        if len(constants) < 2:
            return out
        sizes = np.array([r.held[-1] for r in constants], dtype=float)
        misses = np.array([r.window_misses for r in constants])  # (fleet, window)
        window, cold = self.rp.window_s, self.ahead * self.rp.window_s
        rise = cold * np.maximum(0.0, sizes[None, :] - sizes[:, None])  # (from, to)
        for price in prices:
            cost = sizes * window + price * misses[:, 0]
            back = []
            for w in range(1, self.rp.n_windows):
                total = cost[:, None] + rise
                back.append(np.argmin(total, axis=0))
                cost = total.min(axis=0) + sizes * window + price * misses[:, w]
            k = int(np.argmin(cost))
            ready = [k]
            for b in reversed(back):
                k = int(b[k])
                ready.append(k)
            held = fleet_counts([int(sizes[k]) for k in reversed(ready)], cold, window)
            if all(tuple(held) != f.held for f in self.found):
                out.append(self.keep(self.rp.run(held, save=False), math.nan))
        return out

    def descend(self, start: Run, price: float) -> Run:
        """One sweep, last window first, of the moves below, each taken when it lowers replica-seconds plus
        ``price`` × misses; the sweep's schedule is then replayed whole. Going backwards keeps every checkpoint
        before the window being changed valid."""
        rp, cur = self.rp, start
        for swept, a in enumerate(reversed(rp.free)):
            self.report(swept / (len(rp.free) + 1))
            took = False
            for _ in range(MOST_DOWN):  # fewer replicas from a, one at a time while it pays
                held = self._moved(cur.held, a, "down")
                nxt = None if held is None else self._try(cur, held, a, price)
                if nxt is None:
                    break
                cur, took = nxt, True
            if not took:  # else one more, ordered at a
                held = self._moved(cur.held, a, "up")
                nxt = None if held is None else self._try(cur, held, a, price)
                cur = cur if nxt is None else nxt
        if not cur.exact:
            # checkpoints (a fleet fork per window) only where a later descent from this schedule can reuse them
            cur = self.keep(rp.run(cur.held, save=rp.reuse), price)
        return cur

    def _try(self, cur: Run, held: list[int], a: int, price: float) -> Run | None:
        """``cur`` with ``held`` from window ``a`` on, if that lowers replica-seconds plus ``price`` × misses."""
        rp = self.rp
        changed = max(w for w in range(a, rp.n_windows) if held[w] != cur.held[w])
        until = min(rp.n_windows, changed + 1 + self.past)
        if until >= rp.n_windows:  # the change runs to the end: replay the rest, exactly
            trial = self.keep(rp.run(held, cur, a, save=False), price)
            if cur.exact:
                gain = trial.replica_s - cur.replica_s + price * (float(trial.window_misses.sum()) - self.misses(cur))
            else:
                gain = self._delta(rp.local(trial, a, until), rp.local(cur, a, until), price)
            return trial if gain < -1e-9 else None
        local = rp.trial(cur, held, a, until)
        if self._delta(local, rp.local(cur, a, until), price) < -1e-9:
            return rp.adopt(cur, held, local)
        return None

    @staticmethod
    def _delta(new: Local, old: Local, price: float) -> float:
        return new.replica_s - old.replica_s + price * (new.misses - old.misses)

    def _moved(self, held: tuple[int, ...], a: int, move: str) -> list[int] | None:
        out = list(held)
        end = a
        while end + 1 < len(held) and held[end + 1] == held[a]:
            end += 1
        if move == "down":  # one replica fewer from window a to the end of its plateau
            if held[a] - 1 < self.floor:
                return None
            for w in range(a, end + 1):
                out[w] -= 1
            return out
        # one replica more from window a, ready a cold start later, held two windows past its readiness
        if held[a] + 1 > self.ceiling:
            return None
        for w in range(a, min(len(held), a + self.ahead + 2)):
            out[w] = max(out[w], held[a] + 1)
        return out


@dataclass(frozen=True)
class _Found:
    held: tuple[int, ...]
    attainment: float
    replica_s: float
    misses: float
    price: float  # λ of the descent that found it; nan for a seed
    window_s: float  # the schedule holds one count per window of this length
    schedule: str = "search"  # FrontierPoint.schedule


def _prices(found: Sequence[_Found], most: int) -> list[float]:
    """Prices (replica-seconds per missed request) at which the measured schedules trade: the slopes of their
    lower envelope (at most ``most`` - 1 of them, spread evenly over the sorted slopes), and one past the
    dearest, highest first."""
    pts = envelope([FrontierPoint(-f.misses, f.replica_s, 0.0) for f in found])
    slopes = sorted(
        {
            (b.replica_hours - a.replica_hours) / (b.slo_attainment - a.slo_attainment)
            for a, b in itertools.pairwise(pts)
            if b.slo_attainment > a.slo_attainment and b.replica_hours > a.replica_hours
        }
    )
    if most <= 0:
        return []
    if len(slopes) > most - 1:
        picks = np.linspace(0, len(slopes) - 1, most - 1).round().astype(int)
        slopes = [slopes[i] for i in sorted(set(picks))]
    # past the dearest trade, buying the last misses back is worth more replicas
    return sorted([*slopes, TOP_PRICE_FACTOR * max(slopes, default=1.0)], reverse=True)


def envelope_of(found: Sequence[_Found]) -> list[_Found]:
    """The schedules whose replays lie on the lower envelope of all of them."""
    by_point = {(f.attainment, f.replica_s / 3600.0): f for f in found}
    hull = envelope([FrontierPoint(a, h, 0.0) for a, h in by_point])
    return [by_point[(p.slo_attainment, p.replica_hours)] for p in hull]


def frontier(
    trace: Any,
    make_fleet: Callable[[int], Any],
    replay: Callable[[list[int]], tuple[float, float]],
    *,
    initial: int,
    slo_s: float,
    fidelity: str,
    min_replicas: int,
    max_replicas: int,
    cold_start_s: float,
    tick_s: float,
    warmup_s: float,
    most_prices: int = MOST_PRICES,
    progress: Callable[[float], None] | None = None,
    seeds: Mapping[str, Sequence[int]] | None = None,
    replay_per_tick: Callable[[list[int]], tuple[float, float]] | None = None,
    arrivals_s: Sequence[float] | None = None,
    replica_rps: float | None = None,
) -> Frontier:
    """The frontier for this trace: the lower envelope of every schedule the search replayed whole, each point
    then verified by ``replay(held replicas per window)`` → (attainment, replica-hours), measured as the
    policies are. ``seeds``: policy → the count it held after each tick's decision (one per tick, the first at
    0 s), replayed as schedules of their own and started from; a seed's schedule on the envelope is verified by
    ``replay_per_tick(count per tick)``. ``arrivals_s`` (every request's arrival, seconds from the start) and
    ``replica_rps`` (a replica's saturated requests/s): the need-ahead schedules (``NEED_AHEAD``), seeded last."""
    floor, ceiling = max(min_replicas, 0), max_replicas
    seeds = seeds or {}
    ahead = arrivals_s is not None and replica_rps is not None and replica_rps > 0
    if (seeds or ahead) and replay_per_tick is None:
        raise ValueError("seeded schedules need replay_per_tick to be verified")

    def replayer(window_s: float) -> Replayer:
        return Replayer(
            trace,
            make_fleet,
            initial=initial,
            slo_s=slo_s,
            fidelity=fidelity,
            tick_s=tick_s,
            warmup_s=warmup_s,
            window_s=window_s,
            clamp=lambda n: min(max(n, floor), ceiling),
        )

    rp = replayer(WINDOW_S)
    search = _Search(rp, cold_start_s=cold_start_s, floor=floor, ceiling=ceiling)

    def stage(lo: float, hi: float) -> Callable[[float], None]:
        """Progress within a stage of the search that spans [lo, hi] of the bar (shares guessed, not timed)."""
        return lambda share: None if progress is None else progress(lo + (hi - lo) * min(max(share, 0.0), 1.0))

    search.report = stage(0.0, 0.05)
    constants = search.constants()
    search.priced(constants, _prices(search.found, MOST_PRICED))
    descended: set[tuple[tuple[int, ...], float]] = set()

    def descend_at(prices: list[float], lo: float, hi: float) -> None:
        for i, price in enumerate(prices):
            search.report = stage(lo + (hi - lo) * i / len(prices), lo + (hi - lo) * (i + 1) / len(prices))
            # from the cheapest schedule so far at this price that the descent can change (one count per window)
            start = min(
                (f for f in search.found if f.window_s == rp.window_s), key=lambda f: f.replica_s + price * f.misses
            )
            if (start.held, price) not in descended:
                descended.add((start.held, price))
                search.descend(rp.run(start.held), price)
            search.report(1.0)

    # The search without seeds first, unchanged, so that seeds only add schedules: descents from seeds, at the
    # prices the seeds' trade-offs give, do not replace what the unseeded descents find (on ServeGen days 2 and 3
    # h 12-18 they would have raised the frontier at 99.9 % by 6 %).
    descend_at(_prices(search.found, most_prices), 0.1, 0.5 if seeds else 0.85)
    fine = replayer(tick_s) if seeds or ahead else None
    if seeds:
        assert fine is not None
        for i, (name, per_tick) in enumerate(seeds.items()):
            search.seeded(name, per_tick, fine)
            stage(0.5, 0.6)((i + 1) / len(seeds))
        descend_at(_prices(search.found, most_prices), 0.6, 0.85)
    if ahead:
        # last, so that every stage above runs as it would without them: they only add schedules
        assert fine is not None
        assert arrivals_s is not None
        assert replica_rps is not None
        need = service_need(arrivals_s, len(rp.times), tick_s, slo_s)
        for i, (ahead_s, share) in enumerate(NEED_AHEAD):
            search.seeded(
                f"need {ahead_s:g} s ahead at {share:g}", need_ahead(need, tick_s, ahead_s, share * replica_rps), fine
            )
            stage(0.85, 0.9)((i + 1) / len(NEED_AHEAD))
    verified = []
    points = envelope_of(search.found)
    for i, f in enumerate(points):
        stage(0.9, 1.0)(i / len(points))
        if f.window_s == rp.window_s:
            attainment, hours = replay(list(f.held))
        else:
            assert replay_per_tick is not None
            attainment, hours = replay_per_tick(list(f.held))
        verified.append(FrontierPoint(attainment, hours, f.price, f.schedule))
    if progress is not None:
        progress(1.0)
    return Frontier(envelope(verified), tuple(seeds))
