"""Replays of a held replica count per window, with checkpoints: the frontier's way to try a change to a schedule
without replaying the part of the trace before it.

A replay is run_policy's loop for a policy that sets ``held[w]`` at window w's decision: the same ticks, the same
first decision (after the warm-up minute), replicas counted at every tick (loading and draining included) and the
same measure at the end (requests admitted by the end get ``4 × SLO`` to reach their first token; never served is a
miss). A run from a checkpoint forks the fleet as it was at that window's decision and continues from there, so a
whole run and a run resumed from its checkpoint give the same numbers (tested).

Reuse (request level): there a replay of a schedule is the same whichever way it is computed — whole, or resumed
from a checkpoint of any run that agrees with it before the checkpoint's window (a checkpoint is the fleet at that
window's decision, before it, so it depends on the counts before that window only): the simulator is deterministic
and a fork continues exactly as the fleet would have, the requests finished before the checkpoint are the prefix of
the finished list, and replica-seconds are added tick by tick in the same order from the same partial sum. So a
schedule replayed before is not replayed again (its run is returned, with the checkpoints the call would have
given), a change tried before over the same windows from the same window is not tried again (a trial depends on the
counts before ``until`` only), and a whole run that keeps checkpoints starts from the latest checkpoint of the last
such runs that its schedule agrees with. Every number is bit-identical to replaying (tested). Not at the fluid level:
a resumed run adds the TTFT weights recorded after its checkpoint to the checkpoint's sums, a whole run sums them
all at once, and the two differ in the last bits.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scaler.backtest import sim

# Reuse at the request level (the module's docstring): schedules, tried changes and saved runs kept, the oldest
# forgotten first (a run holds its finished requests' arrays; a saved one a fleet fork per window).
KEEP_RUNS = 64
KEEP_TRIALS = 256
KEEP_SAVED = 2


@dataclass(frozen=True)
class Checkpoint:
    """The replay at one window's decision tick, after the tick's count and before the decision."""

    window: int
    tick: int
    fleet: Any  # a fork of the fleet
    replica_s: float  # counted up to and including this tick
    finished: int  # request level: requests finished before the tick (their outcomes are the run's prefix)
    good_w: float  # fluid level: TTFT weight within the SLO recorded before the tick
    total_w: float  # fluid level: TTFT weight recorded before the tick


@dataclass
class Run:
    """One replay of ``held``: exact when ``exact`` (the whole trace replayed or resumed from a checkpoint of an
    exact run), else a base whose windows after a truncated change are stale."""

    held: tuple[int, ...]
    attainment: float
    replica_s: float
    tick_replicas: np.ndarray  # replicas counted at each tick
    window_misses: np.ndarray  # misses per window (request level: by arrival; fluid: recorded in the window)
    window_total: np.ndarray  # requests per window, counted as the misses are
    fin_arrival: np.ndarray  # request level: finished requests' arrivals, in completion order
    fin_good: np.ndarray  # … and whether their first token came within the SLO
    cum_w: np.ndarray  # fluid level: (good, total) weight recorded before each window's decision, shape (W, 2)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    exact: bool = True

    @property
    def replica_hours(self) -> float:
        return self.replica_s / 3600.0


class Replayer:
    """Replays held-count schedules of one trace on forks of one simulated fleet."""

    def __init__(
        self,
        trace: Any,
        make_fleet: Callable[[int], Any],
        *,
        initial: int,
        slo_s: float,
        fidelity: str,
        tick_s: float,
        warmup_s: float,
        window_s: float,
        clamp: Callable[[int], int],
        reuse: bool = True,
    ) -> None:
        self.trace, self.make_fleet, self.initial = trace, make_fleet, initial
        self.slo_s, self.fluid, self.window_s, self.clamp = slo_s, fidelity == "fluid", window_s, clamp
        self.duration = float(trace.duration_s)
        steps = max(1, math.ceil(self.duration / tick_s))
        self.times = np.minimum(np.arange(steps + 1) * tick_s, self.duration)
        self.n_windows = max(1, math.ceil(self.duration / window_s))
        # The decision ticks as run_policy meets them: the first after the warm-up, then one window apart.
        self.decision_at: dict[int, int] = {}  # tick → window it decides
        next_decision = warmup_s
        for i, t in enumerate(self.times):
            if t + 1e-9 >= next_decision:
                self.decision_at[i] = min(int(t // window_s), self.n_windows - 1)
                next_decision = t + window_s
        self.tick_of: dict[int, int] = {}  # window → its (first) decision tick
        for i, w in self.decision_at.items():
            self.tick_of.setdefault(w, i)
        self.free = sorted(self.tick_of)  # windows a schedule can change
        self.window_of_tick = np.minimum((self.times // window_s).astype(int), self.n_windows - 1)
        if self.fluid:
            self.arrivals = np.zeros(0)
            self.n_requests = 0
        else:
            self.arrivals = np.sort(np.asarray(trace.columns.arrival_s, dtype=float))
            self.n_requests = len(self.arrivals)
        edges = np.arange(self.n_windows + 1) * window_s
        edges[-1] = math.inf
        self.edges = edges
        self.window_arrivals = np.histogram(self.arrivals, bins=edges)[0] if not self.fluid else None
        # Replays reused at the request level unless ``reuse`` is off (the module's docstring).
        self.reuse = reuse and not self.fluid
        self._runs: OrderedDict[tuple[int, ...], Run] = OrderedDict()  # schedule → its run, checkpoints dropped
        self._trials: OrderedDict[tuple[tuple[int, ...], int, int], Local] = OrderedDict()
        self._saved: list[Run] = []  # the last runs that kept a checkpoint at every window, newest last

    # -- whole and resumed runs --------------------------------------------------------------------------------
    def run(self, held: Sequence[int], base: Run | None = None, start: int | None = None, save: bool = True) -> Run:
        """Replay ``held`` to the end and measure it; from ``base``'s checkpoint at window ``start`` when given
        (``held`` must then agree with ``base.held`` before it). ``save``: keep a checkpoint at every window."""
        held = tuple(self.clamp(int(n)) for n in held)
        whole_saved = self.reuse and save and (base is None or start is None)  # a checkpoint at every window
        if self.reuse:
            known = self._runs.get(held)
            if known is not None and not save:
                self._runs.move_to_end(held)
                inherited = {} if base is None or start is None else _before(base.checkpoints, start)
                return dataclasses.replace(known, checkpoints=inherited)
            if whole_saved:
                for kept in reversed(self._saved):
                    if kept.held == held:
                        return kept
                base, start = self._deepest(held)
        run = self._run(held, base, start, save)
        if self.reuse:
            self._runs[held] = dataclasses.replace(run, checkpoints={})
            if len(self._runs) > KEEP_RUNS:
                self._runs.popitem(last=False)
            if whole_saved:
                self._saved = [*self._saved[-(KEEP_SAVED - 1) :], run]
        return run

    def _deepest(self, held: tuple[int, ...]) -> tuple[Run | None, int | None]:
        """The kept run and window whose checkpoint ``held`` can start from: the latest window before which the
        two schedules agree (a checkpoint is the replay at its window's decision, before it: it depends on the
        counts before that window only)."""
        best: tuple[Run | None, int | None] = (None, None)
        for kept in self._saved:
            agree = next((w for w, (x, y) in enumerate(zip(kept.held, held, strict=True)) if x != y), len(held))
            at = max((w for w in kept.checkpoints if w <= agree), default=None)
            if at is not None and (best[1] is None or at > best[1]):
                best = (kept, at)
        return best

    def _run(self, held: tuple[int, ...], base: Run | None, start: int | None, save: bool) -> Run:
        if base is not None and start is not None:
            cp = base.checkpoints[start]
            fleet, tick, replica_s = cp.fleet.fork(), cp.tick, cp.replica_s
            counts = base.tick_replicas.copy()
            fin_arr, fin_good = base.fin_arrival[: cp.finished], base.fin_good[: cp.finished]
            good_w, total_w = cp.good_w, cp.total_w
            cum_w = base.cum_w.copy()
            checkpoints = _before(base.checkpoints, start)
            resumed = True
        else:
            fleet, tick, replica_s = self.make_fleet(self.initial), 0, 0.0
            counts = np.zeros(len(self.times), dtype=int)
            fin_arr, fin_good = np.zeros(0), np.zeros(0, dtype=bool)
            good_w = total_w = 0.0
            cum_w = np.zeros((self.n_windows, 2))
            checkpoints = {}
            resumed = False
        own_good_w, own_total_w = good_w, total_w
        for i in range(tick, len(self.times)):
            if not (resumed and i == tick):
                t = float(self.times[i])
                fleet.advance_to(t)
                n = sim.replica_count(fleet)
                counts[i] = n
                if i > 0:
                    replica_s += n * (t - float(self.times[i - 1]))
            w = self.decision_at.get(i)
            if w is None:
                continue
            if self.fluid:
                g, tot = _weights(fleet, self.slo_s)
                cum_w[w] = (own_good_w + g, own_total_w + tot)
            if save and not (resumed and i == tick) and self.tick_of.get(w) == i:
                finished = len(fin_arr) + len(fleet.finished())
                checkpoints[w] = Checkpoint(w, i, fleet.fork(), replica_s, finished, *cum_w[w])
            fleet.set_replicas(held[w])
        fleet.advance_to(self.duration + 4 * self.slo_s)
        return self._measure(
            fleet, held, replica_s, counts, fin_arr, fin_good, own_good_w, own_total_w, cum_w, checkpoints
        )

    def _measure(
        self,
        fleet: Any,
        held: tuple[int, ...],
        replica_s: float,
        counts: np.ndarray,
        fin_arr: np.ndarray,
        fin_good: np.ndarray,
        good_w: float,
        total_w: float,
        cum_w: np.ndarray,
        checkpoints: dict[int, Checkpoint],
    ) -> Run:
        if self.fluid:
            g, tot = _weights(fleet, self.slo_s)
            good_w, total_w = good_w + g, total_w + tot
            attainment = 1.0 if total_w <= 0 else good_w / total_w
            ends = np.vstack([cum_w[1:], [[good_w, total_w]]])
            recorded = np.diff(np.vstack([[[0.0, 0.0]], ends]), axis=0)
            misses, totals = recorded[:, 1] - recorded[:, 0], recorded[:, 1]
            return Run(held, attainment, replica_s, counts, misses, totals, fin_arr, fin_good, cum_w, checkpoints)
        own = fleet.finished()
        fin_arr = np.concatenate([fin_arr, np.fromiter((f.arrival_s for f in own), float, len(own))])
        fin_good = np.concatenate([fin_good, np.fromiter((f.ttft_s <= self.slo_s for f in own), bool, len(own))])
        running = [a for a, ttft in fleet.in_flight() if ttft is not None and ttft <= self.slo_s]
        good = np.concatenate([fin_arr[fin_good], np.asarray(running, dtype=float)])
        attainment = 1.0 if not self.n_requests else len(good) / self.n_requests
        assert self.window_arrivals is not None
        misses = self.window_arrivals - np.histogram(good, bins=self.edges)[0]
        totals = self.window_arrivals.astype(float)
        misses = misses.astype(float)
        return Run(held, attainment, replica_s, counts, misses, totals, fin_arr, fin_good, cum_w, checkpoints)

    # -- a change tried over a few windows ---------------------------------------------------------------------
    def trial(self, base: Run, held: Sequence[int], start: int, until: int) -> Local:
        """``held`` over windows [start, until), resumed from ``base``'s checkpoint at ``start``; compare with
        ``self.local(base, start, until)``. Arrivals after ``until`` are not replayed, so this is exact for the
        windows it covers only when the change leaves no backlog past them."""
        held = tuple(self.clamp(int(n)) for n in held)
        key = (held[:until], start, until)
        if self.reuse and key in self._trials:
            self._trials.move_to_end(key)
            return self._trials[key]
        local = self._trial(base, held, start, until)
        if self.reuse:
            self._trials[key] = local
            if len(self._trials) > KEEP_TRIALS:
                self._trials.popitem(last=False)
        return local

    def _trial(self, base: Run, held: tuple[int, ...], start: int, until: int) -> Local:
        cp = base.checkpoints[start]
        fleet = cp.fleet.fork()
        end_t = float(self.edges[until]) if until < self.n_windows else self.duration
        last = min(int(np.searchsorted(self.times, end_t - 1e-9)), len(self.times) - 1)
        counts = np.zeros(last - cp.tick, dtype=int)  # ticks cp.tick+1 … last
        marks = [(start, 0.0, 0.0)]  # fluid: (window, good, total) recorded before each window's decision
        for i in range(cp.tick, last + 1):
            if i > cp.tick:
                fleet.advance_to(float(self.times[i]))
                counts[i - cp.tick - 1] = sim.replica_count(fleet)
            w = self.decision_at.get(i)
            if w is not None and i < last:
                if self.fluid and i > cp.tick and self.tick_of.get(w) == i:
                    marks.append((w, *_weights(fleet, self.slo_s)))
                fleet.set_replicas(held[w])
        dt = np.diff(self.times[cp.tick : last + 1])
        replica_s = float(np.sum(counts * dt))
        if self.fluid:
            marks.append((until, *_weights(fleet, self.slo_s)))
            misses = np.zeros(until - start)
            for (w0, g0, t0), (_, g1, t1) in itertools.pairwise(marks):
                misses[w0 - start] = (t1 - t0) - (g1 - g0)
            return Local(start, until, cp.tick, counts, misses, replica_s)
        fleet.advance_to(end_t + self.slo_s + 1e-6)  # every arrival before end_t has its first token by then or missed
        t0 = float(self.edges[start])
        good = [f.arrival_s for f in fleet.finished() if t0 <= f.arrival_s < end_t and f.ttft_s <= self.slo_s]
        good += [a for a, x in fleet.in_flight() if t0 <= a < end_t and x is not None and x <= self.slo_s]
        assert self.window_arrivals is not None
        got = np.histogram(np.asarray(good, dtype=float), bins=self.edges[start : until + 1])[0]
        return Local(start, until, cp.tick, counts, (self.window_arrivals[start:until] - got).astype(float), replica_s)

    def local(self, base: Run, start: int, until: int) -> Local:
        """``base`` over windows [start, until), counted as ``trial`` counts them."""
        i0 = self.tick_of[start]
        end_t = float(self.edges[until]) if until < self.n_windows else self.duration
        last = min(int(np.searchsorted(self.times, end_t - 1e-9)), len(self.times) - 1)
        counts = base.tick_replicas[i0 + 1 : last + 1]
        replica_s = float(np.sum(counts * np.diff(self.times[i0 : last + 1])))
        return Local(start, until, i0, counts.copy(), base.window_misses[start:until].copy(), replica_s)

    def adopt(self, base: Run, held: Sequence[int], local: Local) -> Run:
        """``base`` with a tried change taken: its windows [start, until) as the trial saw them; the windows after
        keep the base's numbers (stale until the next whole run), and only checkpoints before the change stay."""
        counts = base.tick_replicas.copy()
        counts[local.tick + 1 : local.tick + 1 + len(local.tick_replicas)] = local.tick_replicas
        misses = base.window_misses.copy()
        misses[local.start : local.until] = local.window_misses
        checkpoints = {w: c for w, c in base.checkpoints.items() if w <= local.start}
        replica_s = float(np.sum(counts[1:] * np.diff(self.times)))
        return Run(
            tuple(self.clamp(int(n)) for n in held),
            math.nan,
            replica_s,
            counts,
            misses,
            base.window_total,
            base.fin_arrival,
            base.fin_good,
            base.cum_w,
            checkpoints,
            exact=False,
        )


@dataclass(frozen=True)
class Local:
    """A schedule over windows [start, until): replicas counted at ticks tick+1 …, misses per window."""

    start: int
    until: int
    tick: int
    tick_replicas: np.ndarray
    window_misses: np.ndarray
    replica_s: float

    @property
    def misses(self) -> float:
        return float(self.window_misses.sum())


def _before(checkpoints: dict[int, Checkpoint], start: int) -> dict[int, Checkpoint]:
    return {w: c for w, c in checkpoints.items() if w <= start}


def _weights(fleet: Any, slo_s: float) -> tuple[float, float]:
    values, weights = fleet.ttft_samples()
    if not len(values):
        return 0.0, 0.0
    return float(np.sum(weights[values <= slo_s])), float(np.sum(weights))
