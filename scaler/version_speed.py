"""How fast a rollout's new version serves against the old one, from what the replicas report (issue 16).

A new build can be slower (a different kernel, quantisation, a larger model under the same name): once the rollout
ends the fleet serves less with the same replica count, and a planner that sized it from a configured profile (or a
capacity learned only under saturation) does not know until users wait. While both versions serve, each tick
compares their decode step time — the mean inter-token latency over the rate window, ``Δsum / Δcount`` of the
engine's ITL histogram — at comparable load (running sequences per replica within ``load_tolerance``): step time
grows with the batch, so a version given more work would read slower for it. Only a sustained difference counts:
``min_samples`` comparisons, the median ratio at least ``1 + min_slowdown`` and that share of them above it in at
least ``sustained_share``. The measurement is kept as long as any ready replica serves the new version.

A rollout can end before ``min_samples`` comparisons: in waves of half the fleet the two versions serve side by
side for about one cold start, less the time the new replicas take to reach comparable load (Mooncake in waves of
2 of 4, speed 0.8: 17 comparisons before the last old replica left, 2026-12-04). The old version's step times
are then the last ones it was measured at: each tick its recorded windows (those it served during this rollout,
the last ``max_samples``) stand in for it, the one at the load nearest the new version's, within
``load_tolerance``, so that the comparison runs to ``min_samples`` and is judged by the same thresholds; it stops
there, and is not started where no comparison ran while both versions served. Such a measurement says so
(``VersionSpeed.recorded``): the rollout stage applies it once the rollout ends.

A new replica is not yet what its version is: for its first minute it warms up (compilation and CUDA graphs for new
shapes; the simulator's 30 s at up to 1.5x) and its prefix cache is empty, so more prompt tokens ride in its decode
steps, and it runs more sequences for it where the router does not balance by load. With ``settle_s`` set (off by
default), each replica's window is read only from ``settle_s`` after its first kept sample (the part of the rate window
after it; the replica is left out until then), its running sequences averaged over the same span. Diagnosed on `kvpilot
demo --rollout-at 1645` with equal versions (2026-12-06, round-robin routing since the demo's 1,500 s fault; its run
without the surge): the first comparisons read 1.76, 1.47, 1.50, 1.42, ... (the new replica's first 90 s, inside its
window), then 1.08-1.15 at 5-11 % more running sequences, the median of 24 1.14 and of 59 1.08: "0.93x", the count
scaled by 1.08. Not corrected for load within ``load_tolerance``: a correction by the old version's own slope of step
time against running sequences over-corrected where the router sends a replica a different mix (prefix affinity on Azure
conversation: the median of the first 24 went 1.02 -> 1.13 with it). Why off: a minute's settling reads an equal version
at 1.00 but a slower one a minute or more later, and in waves of 1 at 0.8 the count scaled that much later cost up to 2
points during the rollout (BENCHMARKS.md "Rolling updates", 2026-12-06).

A faster new version is measured too but never shrinks a count (``scale_factor`` is at least 1): the planner's
capacity learns that in its own time, and a fleet briefly too large costs money, not users.

Not seen: a version whose prefill alone is slower (ITL is the decode step's time; a prefill chunk rides in a step,
so only its share shows), and one that differs only in KV pool size.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from collector.rates import histogram_increase
from collector.state import FleetState, ReplicaView


@dataclass(frozen=True, slots=True)
class SpeedThresholds:
    """When a measured step-time difference between two versions is believed (defaults; see the module)."""

    # Ticks where both versions were compared at comparable load: two minutes at 5 s. Successive ticks share most
    # of their rate window (60 s), so 12 would be one independent look.
    min_samples: int = 24
    min_tokens: float = 200.0  # ITL observations (tokens decoded) per version within a tick's rate window
    load_tolerance: float = 0.25  # running sequences per replica of the two versions within this share
    min_slowdown: float = 0.10  # the new version's step time at least 10 % above the old one's ...
    sustained_share: float = 0.75  # ... in at least this share of the comparisons
    max_samples: int = 240  # comparisons kept (the median is over these)
    # Seconds of a replica's first serving left out of its window (warming up, an empty prefix cache: a freshly
    # started replica of either version reads slower for it; the demo's equal versions 1.2-1.8x in its first 90 s).
    # Off (0) by default: 60 s kept an equal version at 1.00 but measured a slower one 80 s later, and at 0.8 in
    # waves of 1 cost Azure code 0.59 (API) and 2.06 (kube-state-metrics) points during the rollout (2026-12-06,
    # BENCHMARKS.md "Rolling updates").
    settle_s: float = 0.0

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError(f"speed thresholds: need 1 <= min_samples <= max_samples, got {self}")
        for name in ("min_tokens", "load_tolerance", "min_slowdown", "settle_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"speed thresholds: {name} must be a finite number >= 0, got {value!r}")
        if not 0 < self.sustained_share <= 1:
            raise ValueError(f"speed thresholds: sustained_share must be in (0, 1], got {self.sustained_share!r}")


@dataclass(frozen=True, slots=True)
class VersionLoad:
    """One version's ready replicas at one tick: decode step time and load."""

    itl_mean_s: float  # mean inter-token latency over the rate window (Δsum / Δcount)
    tokens: float  # ITL observations in the window
    running_per_replica: float


# One replica's window: (ITL sum, ITL count, running sequences averaged over the same span); None: not usable yet.
ReplicaWindow = tuple[float, float, float]


def _latest_window(r: ReplicaView) -> ReplicaWindow | None:
    """The replica's ITL over the rate window and its latest running-sequences gauge (no settling, no history)."""
    window, running = r.itl_window, r.sample.requests_running
    if window is None or running is None:
        return None
    return window.sum, window.count, running


def settled_windows(state: FleetState, settle_s: float) -> Callable[[ReplicaView], ReplicaWindow | None]:
    """Per replica, its ITL increase over the rate window and its running sequences averaged over the same span
    (a bursty trace's gauge at one instant says little of the batches the window's steps ran), the span starting
    no earlier than ``settle_s`` after the replica's first kept sample: a replica's first minute of serving reads
    slower whatever its version (module docstring). None while nothing of the window is past that."""

    def window(r: ReplicaView) -> ReplicaWindow | None:
        since = r.last_seen - state.rate_window_s
        first = state.replica_history_start(r.key)
        settled = settle_s <= 0 or first is None or first + settle_s <= since
        if not settled:
            since = first + settle_s if first is not None else since
            if since >= r.last_seen:
                return None
        samples = state.replica_history_since(r.key, since)
        itl = r.itl_window if settled else histogram_increase([s.itl for s in samples if s.itl is not None])
        known = [s.requests_running for s in samples if s.requests_running is not None]
        running = sum(known) / len(known) if known else r.sample.requests_running
        if itl is None or running is None:
            return None
        return itl.sum, itl.count, running

    return window


def version_loads(
    replicas: Iterable[ReplicaView],
    version_of: Callable[[ReplicaView], str],
    window_of: Callable[[ReplicaView], ReplicaWindow | None] = _latest_window,
) -> dict[str, VersionLoad]:
    """Per version, the ready replicas' ITL over their windows and running sequences per replica (``window_of``:
    the rate window and the latest gauge unless told); a replica without a usable window is left out, and a version
    none of whose replicas has one."""
    sums: dict[str, list[float]] = {}  # version -> [itl sum, itl count, running, replicas]
    for r in replicas:
        if not r.ready:
            continue
        window = window_of(r)
        if window is None or window[1] <= 0:
            continue
        acc = sums.setdefault(version_of(r), [0.0, 0.0, 0.0, 0.0])
        acc[0] += window[0]
        acc[1] += window[1]
        acc[2] += window[2]
        acc[3] += 1
    return {
        v: VersionLoad(itl_mean_s=s / n, tokens=n, running_per_replica=running / k)
        for v, (s, n, running, k) in sums.items()
        if n > 0 and math.isfinite(s) and s > 0
    }


@dataclass(frozen=True, slots=True)
class VersionSpeed:
    """A measured, sustained difference: the new version's step time over the old one's (``ratio`` > 1: slower)."""

    version: str
    old_version: str
    ratio: float  # against the version the fleet was sized for (earlier rollouts' ratios compound)
    samples: int
    step_ratio: float  # the median inter-token latency against old_version's over the comparisons
    recorded: bool = False  # completed once the old version had left, against its recorded windows

    @property
    def text(self) -> str:
        text = (
            f"{self.version} decodes at {1 / self.step_ratio:.2f}x the speed of {self.old_version} "
            f"(inter-token latency {self.step_ratio:.2f}x, median of {self.samples} comparisons at comparable load)"
        )
        if abs(self.ratio - self.step_ratio) > 1e-9:
            text += f", {1 / self.ratio:.2f}x the speed of the version before it"
        return text


@dataclass
class _Track:
    version: str
    old_version: str
    base: float = 1.0  # the old version's own ratio, where an earlier rollout measured one (ratios compound)
    carried: VersionSpeed | None = None  # that earlier measurement: it holds while its version still serves
    ratios: deque[float] = field(default_factory=deque)
    measured: VersionSpeed | None = None
    old_loads: deque[VersionLoad] = field(default_factory=deque)  # the old version's windows while it served
    recorded: bool = False  # comparisons against those windows ran (the old version had left)

    def pending(self, th: SpeedThresholds, serving: set[str]) -> bool:
        """The old version no longer serves and its comparison stopped short of ``min_samples``: it goes on
        against the old version's recorded windows."""
        return (
            self.measured is None
            and 0 < len(self.ratios) < th.min_samples
            and bool(self.old_loads)
            and self.old_version not in serving
            and self.version in serving
        )


class SpeedTracker:
    """Per deployment, the comparisons of a rollout's new version against the old one, and what they showed."""

    def __init__(self, thresholds: SpeedThresholds | None = None) -> None:
        self.thresholds = thresholds or SpeedThresholds()
        self._tracks: dict[str, _Track] = {}

    def forget(self, key: str) -> None:
        self._tracks.pop(key, None)

    def comparisons(self, key: str) -> tuple[float, ...]:
        """The step-time ratios (new version over old) compared so far in ``key``'s rollout, oldest first."""
        track = self._tracks.get(key)
        return () if track is None else tuple(track.ratios)

    def measured(self, key: str) -> VersionSpeed | None:
        """What ``key``'s rollout has measured so far (None: no sustained difference), whether it applies now or not."""
        track = self._tracks.get(key)
        return None if track is None else track.measured

    def update(
        self,
        key: str,
        replicas: Iterable[ReplicaView],
        version_of: Callable[[ReplicaView], str],
        new_version: str | None,
        window_of: Callable[[ReplicaView], ReplicaWindow | None] = _latest_window,
    ) -> VersionSpeed | None:
        """One tick: compare ``new_version`` (None: one version serves) against the other version with the most
        ITL observations, and return the measurement that holds for the deployment now (None: none yet, or its
        version no longer serves). Ratios compound across rollouts: a version measured against one that was
        itself measured slower is reported against the version before it, the one the planner was sized for."""
        track = self._tracks.get(key)
        if new_version is None and track is None:
            return None  # one version and nothing measured: the common tick costs no pass over the replicas
        replicas = list(replicas)
        serving = {version_of(r) for r in replicas if r.ready}
        pending = track is not None and new_version in (None, track.version) and track.pending(self.thresholds, serving)
        loads = version_loads(replicas, version_of, window_of) if new_version is not None or pending else {}
        if pending and track is not None and track.version in loads:
            self._compare_recorded(track, loads[track.version])
        if new_version is not None and (track is None or track.version != new_version):
            before = None if track is None else (track.measured or track.carried)
            if before is not None and before.version not in serving:
                before = None
            track = None
            self._tracks.pop(key, None)
            others = sorted(v for v in serving if v != new_version)
            if others:
                # the old version: the one measured before where it still serves, else the one decoding the most
                old = (
                    before.version
                    if before is not None and before.version in others
                    else max(others, key=lambda v: loads[v].tokens if v in loads else 0.0)
                )
                base = before.ratio if before is not None and before.version == old else 1.0
                track = self._tracks[key] = _Track(new_version, old, base=base, carried=before)
        if track is not None and new_version == track.version and new_version in loads and track.old_version in loads:
            old_load = loads[track.old_version]
            if old_load.tokens >= self.thresholds.min_tokens:
                track.old_loads.append(old_load)
                while len(track.old_loads) > self.thresholds.max_samples:
                    track.old_loads.popleft()
            self._compare(track, loads[new_version], old_load)
        if track is None:
            return None
        if track.measured is not None and track.version in serving:
            return track.measured
        if track.carried is not None and track.carried.version in serving:
            return track.carried
        if track.version not in serving:
            self._tracks.pop(key, None)  # rolled back (or gone): nothing measured describes the replicas now
        return None

    def _compare_recorded(self, track: _Track, new: VersionLoad) -> None:
        """The new version against the old version's recorded window at the load nearest its own (the latest
        of equals), once the old version no longer serves."""
        nearest = min(reversed(track.old_loads), key=lambda old: abs(old.running_per_replica - new.running_per_replica))
        track.recorded = True
        self._compare(track, new, nearest)

    def _compare(self, track: _Track, new: VersionLoad, old: VersionLoad) -> None:
        th = self.thresholds
        if min(new.tokens, old.tokens) < th.min_tokens:
            return
        busier = max(new.running_per_replica, old.running_per_replica)
        if busier <= 0 or abs(new.running_per_replica - old.running_per_replica) > th.load_tolerance * busier:
            return  # not comparable: a step's time grows with its batch
        track.ratios.append(new.itl_mean_s / old.itl_mean_s)
        while len(track.ratios) > th.max_samples:
            track.ratios.popleft()
        if len(track.ratios) < th.min_samples:
            return
        median = statistics.median(track.ratios)
        slow, fast = 1.0 + th.min_slowdown, 1.0 / (1.0 + th.min_slowdown)
        enough = th.sustained_share * len(track.ratios)
        slower = median >= slow and sum(r >= slow for r in track.ratios) >= enough
        faster = median <= fast and sum(r <= fast for r in track.ratios) >= enough
        was = track.measured.step_ratio if track.measured is not None and track.measured.samples else None
        if was is not None:
            # A difference once measured stands until the median comes back within half the floor: a tail of
            # quick comparisons (a lull on a bursty trace) must not flip the count down and up again.
            slower = was > 1.0 and median >= 1.0 + th.min_slowdown / 2
            faster = was < 1.0 and median <= 1.0 / (1.0 + th.min_slowdown / 2)
        if slower or faster:
            track.measured = VersionSpeed(
                track.version, track.old_version, track.base * median, len(track.ratios), median, track.recorded
            )
        else:  # within noise of the old version: as fast as the one it replaces
            base = track.base
            track.measured = (
                None if base == 1.0 else VersionSpeed(track.version, track.old_version, base, len(track.ratios), 1.0)
            )


def scale_factor(speed: VersionSpeed | None, *, planner_learnt: float = 1.0) -> float:
    """How much to raise the planner's count for a slower version without counting twice what the planner learnt
    itself. ``planner_learnt``: the slowdown already in the planner's count — its per-replica capacity before the
    new version served over its capacity now (1 for a configured profile, which never moves; ``math.inf`` where
    the planner first learnt a capacity once the new version served). Never below 1: a faster version does not
    shrink the planner's count."""
    if speed is None or not (planner_learnt > 0):
        return 1.0
    return max(1.0, speed.ratio / planner_learnt)
