"""How much of the safe margin a workload needs, learnt from its SLO (the `adaptive` headroom).

The safe rule plans the forecast's upper bound at the target utilisation: two margins above the point forecast,
the same for every workload. Some keep their SLO with none of it (Azure conversation ×10: 99.98 % in SLO sizing
for the point at full capacity), others need all of it, if only now and then (ServeGen's rate steps: clean for a
quarter hour, then a step that a thinner margin misses). `MarginFeedback` keeps a share of that margin: all of it
at start and after any period the SLO was missed (restored fast), and it gives a little up per clean period only
once an hour has passed without a miss (given up slowly, and only by a workload that has shown it needs less).
Kept apart from `SloFeedback`, which corrects the capacity model: a miss says the margin was too thin, whatever
the capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class MarginFeedback:
    """The share of the safe margin to keep (``scale``, in [``floor``, 1]).

    Once per ``period_s`` with at least ``min_requests`` in the window: a miss rate above ``target_miss`` restores
    the whole margin; one at or under half of it gives up ``release`` of it, once ``hold_s`` have passed since the
    last miss; in between holds. Unknown readings and thin windows hold too: only traffic the SLO was measured on
    may thin the margin.
    """

    target_miss: float = 0.01
    period_s: float = 60.0
    min_requests: float = 20.0
    release: float = 0.05  # share of the margin given up per clean period: 20 clean minutes from all to none
    hold_s: float = 3600.0  # after a miss, the whole margin for this long
    floor: float = 0.0
    scale: float = 1.0
    _last_t: float | None = None
    _missed_t: float | None = None

    def __post_init__(self) -> None:
        if not (
            0 < self.target_miss < 1
            and self.period_s > 0
            and 0 < self.release <= 1
            and self.hold_s >= 0
            and 0 <= self.floor <= 1
            and math.isfinite(self.min_requests)
        ):
            raise ValueError(f"margin feedback: bad configuration {self}")

    def update(self, now: float, miss: float | None, requests: float) -> float:
        """One reading: the share of the window's requests that missed the SLO, out of how many."""
        if miss is None or not math.isfinite(miss) or requests < self.min_requests:
            return self.scale
        if self._last_t is not None and now - self._last_t < self.period_s:
            return self.scale
        self._last_t = now
        if miss > self.target_miss:
            self.scale, self._missed_t = 1.0, now
        elif miss <= self.target_miss / 2 and (self._missed_t is None or now - self._missed_t >= self.hold_s):
            self.scale = max(self.floor, self.scale - self.release)
        return self.scale
