"""A scale-down the next burst proved wrong, and the count it released from held for the SLO's hour.

On on/off traffic (Azure's code trace: bursts of seconds to two minutes, silences of minutes) the scale-down window
releases replicas in a silence, and the next burst meets the fleet it left: on code ×3.5 a release from 3 to 2
replicas at minute 41 met 863 requests two minutes later (282 outside the SLO), and one from 2 to 1 at minute 56 the
trace's last burst (737 outside of 844). No rate the planner reads foresees those bursts: the minute-scale rate falls
in every silence, and a 30 s peak from before the window no longer binds. What can be measured is that a release
was wrong: within a cold start and the scale-down window of it (a released replica could not be back in time), the
fleet still at the count it released to, the SLO missed (requests queued past a share of it) while the last short
window's arrivals needed more replicas than that count serves. `ReleaseRegret` records the planner's releases and
judges each tick's SLO reading against them; once one is proven wrong, the count it released from is a floor for
``hold_s`` (the hour the adaptive margin also keeps after a miss, `scaler.margin.MarginFeedback.hold_s`): the
workload has shown that its bursts recur after the window, so the window is not the evidence to release on.

What is held is the proving burst, not a count read once: its service rate (requests/s), in replicas at the lowest
capacity planned with over ``recent_s`` (the burst floor's memory), never more than the count released from. The
count alone was the burst's rate at the capacity of the proving minute, which the SLO feedback had just cut for that
burst's own misses (`scaler.capacity.SloFeedback`; a cut on trial, restored by clean minutes): kept for the hour it
kept the cut after the capacity had recovered (Azure code ×4: 73 req/s proved a release from 5 wrong at 17.5 req/s
a replica, the multiplier at 0.70; back at 1.00 twenty minutes later, the same burst needs 4). The lowest reading of
the window, not the last: a light mix read in a silence between bursts would let the floor follow it down a replica
just before the next burst (×4: 4 → 3 at minute 35 at 24–26 req/s, 48 requests outside at minute 36).

A miss the fleet's size did not cause never counts: a burst that needed no more than the count released to (long
prompts queued behind one another, a replica lost to a fault) is not one a release could have met, and a fleet
that has grown since its release is not the one that was released.
"""

from __future__ import annotations

import math
from collections import deque


class ReleaseRegret:
    """Releases of the last ``recent_s`` and the floor a wrong one leaves for ``hold_s``."""

    def __init__(self, recent_s: float, hold_s: float) -> None:
        if not (math.isfinite(recent_s) and recent_s > 0 and math.isfinite(hold_s) and hold_s >= 0):
            raise ValueError(f"release regret: recent_s must be > 0 and hold_s >= 0, got {recent_s}, {hold_s}")
        self.recent_s = recent_s
        self.hold_s = hold_s
        self._releases: deque[tuple[float, int, int]] = deque()  # (t, count before, count after)
        self._floor: int | None = None
        # The service rate (requests/s) the proving burst needed: None where the capacity it was read at is unknown
        self._rate: float | None = None
        self._until = -math.inf
        self._capacities: deque[tuple[float, float]] = deque()  # (t, capacity a replica) of the last recent_s
        self.regrets = 0  # releases proven wrong so far

    def released(self, now: float, before: int, after: int) -> None:
        """The planner asked for ``after`` replicas where ``before`` were (a scale-down when after < before), both
        in serving replicas (stuck ones not counted), the unit ``judge`` reads and the floor is held in."""
        if after < before:
            self._releases.append((now, before, after))
        self._expire(now)

    def judge(
        self, now: float, current: int, need: float | None, missed: bool, capacity_rps: float | None = None
    ) -> int | None:
        """One tick: ``current`` replicas (stuck ones not counted), ``need`` the replicas at full capacity
        (``capacity_rps`` a replica, the capacity planned with; None: unknown) the last short window's arrivals
        needed within the SLO (None: unknown), ``missed`` whether the SLO reading was above its target. A release of
        the last ``recent_s`` to no more than ``current`` whose count was too few for ``need`` while the SLO missed
        is wrong: the count it released from is held, and with it the rate the burst needed. Returns the floor now
        (`floor`, at ``capacity_rps``)."""
        self._expire(now)
        known = capacity_rps if capacity_rps is not None and math.isfinite(capacity_rps) and capacity_rps > 0 else None
        if known is not None:
            self._capacities.append((now, known))
        while self._capacities and now - self._capacities[0][0] > self.recent_s:
            self._capacities.popleft()
        if missed and need is not None and math.isfinite(need):
            wrong = [before for _, before, after in self._releases if current <= after < need]
            if wrong:
                held = self._floor if now < self._until else None
                rate = need * capacity_rps if capacity_rps is not None and capacity_rps > 0 else None
                if held is not None:
                    rate = None if rate is None or self._rate is None else max(rate, self._rate)
                self._floor = max(max(wrong), 0 if held is None else held)
                self._rate = rate
                self._until = now + self.hold_s
                self.regrets += 1
                self._releases.clear()
        if self._floor is None or now >= self._until:
            return None  # nothing held (most ticks): no pass over the capacities
        return self.floor(now, min(c for _, c in self._capacities) if known is not None else None)

    def floor(self, now: float, capacity_rps: float | None = None) -> int | None:
        """While held, the replicas that serve the proving burst's rate at ``capacity_rps`` a replica (`judge`
        passes the lowest capacity of the last ``recent_s``), never more than the count the wrong release released
        from; that count where the capacity is unknown. None otherwise."""
        if self._floor is None or now >= self._until:
            return None
        if self._rate is None or capacity_rps is None or not capacity_rps > 0 or not math.isfinite(capacity_rps):
            return self._floor
        return min(self._floor, max(1, math.ceil(self._rate / capacity_rps - 1e-9)))

    def _expire(self, now: float) -> None:
        while self._releases and now - self._releases[0][0] > self.recent_s:
            self._releases.popleft()
