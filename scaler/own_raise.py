"""The planner's replica count without what kvpilot itself added on top of the planner: a rollout's surge, or a count
scaled for a slower new version (``scaler.rollout_stage``).

The count the planner starts from is the scale subresource's, and that count is what kvpilot published last: the
planner's decision *plus* the stage's raise. Where the planner keeps the current count (capacity unknown, no arrival
rate, within tolerance, the scale-down window, a step limit), the raise came back as the planner's own count and the
stage added it again, every tick: `kvpilot demo --rollout-at 10` went 2 → 4 → … → 28 in a minute. Told the count
less its own raise, the planner holds what *it* asked for and the stage adds the raise once. Without a scale source
(static and PromQL discovery) the count is the replicas the collector sees, which carry the raise back once its
pods serve (at most once per cold start, but a hold then kept it after the rollout): the loop subtracts the raise
from that count the same way.

The memory is in RAM, so each published decision that carries a raise also records the planner's count
(``PLANNER_REPLICAS`` among its numbers, stored with it); a restarted instance, or a fresh HA replica, rebuilds the
memory from the stored decisions it publishes at start (``resume``). Before, it read the count (planner + surge)
as the planner's own, a hold kept it, and the stage added the surge again: `test_loop_rollout_restart` published
8 instead of 6 for the rest of the rollout, and 6 instead of 4 after it.

Here, below the composition root, so that the live loop (``kvpilot.runtime.loop``) and the backtest
(``scaler.backtest.run``) take the same base.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scaler.decision import Decision

# How long a raise is remembered once it is no longer published, while the count read still carries it: longer
# than KEDA's poll and the HPA's sync take to apply a lower count (30 s + 15 s by default), and bounded, so that a
# count someone else holds above the planner's is the planner's own again.
RAISE_MEMORY_S = 600.0
# Among a published decision's numbers (``Decision.forecast``, stored with it): the planner's count under the raise,
# present only where kvpilot raised the count above it.
PLANNER_REPLICAS = "planner_replicas"


@dataclass(frozen=True, slots=True)
class _Raised:
    base: int  # the planner's count at the last tick
    raised: int  # replicas kvpilot added on top of it, at the last tick it added any
    at: float  # when it last added them
    withdrawn: bool = False  # the last tick added none


class OwnRaise:
    """Per deployment, what the stage after the planner added to the planner's count (``note``), and the count
    read back without it (``planner_count``)."""

    def __init__(self, memory_s: float = RAISE_MEMORY_S) -> None:
        if not (math.isfinite(memory_s) and memory_s > 0):
            raise ValueError(f"OwnRaise: memory_s must be a finite number > 0, got {memory_s!r}")
        self.memory_s = memory_s
        self._raised: dict[str, _Raised] = {}

    def note(self, planned: Sequence[Decision], published: Sequence[Decision], now: float) -> list[Decision]:
        """What the planner decided and what goes out after the stages on top of it (same deployments); returns
        ``published``, each decision raised above the planner's count recording that count (``PLANNER_REPLICAS``)
        for an instance that resumes from it."""
        out = {d.deployment: d.desired_replicas for d in published}
        bases = {d.deployment: max(d.desired_replicas, 0) for d in planned}
        for key, base in bases.items():
            raised = out.get(key, base) - base
            last = self._raised.get(key)
            if raised > 0:
                self._raised[key] = _Raised(base, raised, now)
            elif last is not None:  # no longer raised: the count read may still carry the last raise a while
                self._raised[key] = _Raised(base, last.raised, last.at, withdrawn=True)
        return [_marked(d, bases.get(d.deployment)) for d in published]

    def resume(self, decisions: Iterable[Decision], now: float) -> None:
        """A new instance publishes the decisions a previous one stored: the raise each carries (its
        ``PLANNER_REPLICAS``) is kvpilot's own, as it was for that instance, from ``now`` (published again now)."""
        for d in decisions:
            base = planner_replicas(d)
            if base is not None and d.desired_replicas > base:
                self._raised[d.deployment] = _Raised(base, d.desired_replicas - base, now)

    def planner_count(self, key: str, count: int, now: float) -> int:
        """``count`` (the replicas asked for, as read) without kvpilot's own raise: the part of it above the
        planner's last count, up to the raise. A count at or below the planner's is the planner's own; a raise
        withdrawn is forgotten once the count read has come down to the planner's, or after ``memory_s``."""
        last = self._raised.get(key)
        if last is None:
            return count
        if now - last.at > self.memory_s or (last.withdrawn and count <= last.base):
            del self._raised[key]
            return count
        own = min(max(count - last.base, 0), last.raised)
        return count - own

    def planner_counts(self, counts: Mapping[str, int], now: float) -> dict[str, int]:
        return {key: self.planner_count(key, n, now) for key, n in counts.items()}

    def forget(self, key: str) -> None:
        self._raised.pop(key, None)


def planner_replicas(d: Decision) -> int | None:
    """The planner's count under a published decision's raise, where it records one (an integer >= 0)."""
    value = d.forecast.get(PLANNER_REPLICAS)
    if value is None or not math.isfinite(value) or value < 0 or value != int(value):
        return None
    return int(value)


def _marked(d: Decision, base: int | None) -> Decision:
    if base is None or d.desired_replicas <= base:
        return d
    return dataclasses.replace(d, forecast={**d.forecast, PLANNER_REPLICAS: float(base)})
