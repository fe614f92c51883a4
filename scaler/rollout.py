"""Surge during a rolling update: how many replicas to ask for while a rollout replaces the old ones.

A rolling update drains old replicas while new ones load weights; for the length of one cold start per wave the
fleet serves with fewer ready replicas than the planner wanted, and TTFT's tail jumps. The mitigation is a surge:
ask for ``desired`` plus the replicas being replaced, and start that surge one cold start ahead of each wave, so
that by the time a wave drains its old replicas their successors are already warm. A pure function over plain
values, so the planner, the backtest and a test all call the same arithmetic.

``RolloutTracker`` turns what the control loop sees each tick (the versions among a deployment's replicas, and
the Deployment's own rollout status where the scale source reads Kubernetes) into those values, and
``surge_decision`` raises the planner's decision by the surge. The stage that runs them after the planner, with
its per-deployment memory, is ``scaler.rollout_stage.RolloutStage``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from detectors.rollout import ReadyPeaks
from scaler.decision import Decision


def surge_replicas(
    *,
    desired: int,
    old_remaining: int,
    wave_size: int,
    wave_in_progress: bool,
    next_wave_in_s: float | None,
    cold_start_s: float,
    max_replicas: int | None = None,
) -> int:
    """Replicas to ask for during a rollout: ``desired`` (what demand needs, in ready replicas) plus the surge.

    - ``old_remaining``: replicas still on the old version, counting those of a wave in progress; 0 = no rollout.
    - ``wave_size``: replicas one wave replaces (a Deployment's maxSurge + maxUnavailable, or the rollout's own).
    - ``wave_in_progress``: a wave's new replicas are loading now; they do not serve yet, so the old ones they
      replace are still needed: the surge covers them.
    - ``next_wave_in_s``: seconds until the next wave starts (None: none planned). A wave starting within one cold
      start gets its surge now, so its successors are warm when it drains.
    - ``cold_start_s``: replica start to ready.
    - ``max_replicas``: the ceiling (the surge never lifts the answer above it; ``desired`` above it is kept).

    The surge never exceeds ``old_remaining``: a rollout cannot replace more replicas than it has left.
    """
    for name, value in (("desired", desired), ("old_remaining", old_remaining), ("wave_size", wave_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"surge_replicas: {name} must be an integer >= 0, got {value!r}")
    if not (isinstance(cold_start_s, int | float) and math.isfinite(cold_start_s) and cold_start_s >= 0):
        raise ValueError(f"surge_replicas: cold_start_s must be a finite number >= 0, got {cold_start_s!r}")
    if next_wave_in_s is not None and not (math.isfinite(next_wave_in_s) and next_wave_in_s >= 0):
        raise ValueError(f"surge_replicas: next_wave_in_s must be None or a finite number >= 0, got {next_wave_in_s!r}")
    if max_replicas is not None and (isinstance(max_replicas, bool) or max_replicas < 0):
        raise ValueError(f"surge_replicas: max_replicas must be None or >= 0, got {max_replicas!r}")
    waves = int(wave_in_progress) + int(next_wave_in_s is not None and next_wave_in_s <= cold_start_s)
    surge = min(old_remaining, wave_size * waves)
    if max_replicas is None:
        return desired + surge
    return max(desired, min(desired + surge, max_replicas))


@dataclass(frozen=True, slots=True)
class DeploymentRollout:
    """What the Kubernetes Deployment object says of its rollout, where the scale source reads it:
    ``metadata.generation`` against ``status.observedGeneration``, ``spec.replicas`` against
    ``status.updatedReplicas`` (pods on the newest template), ``status.replicas`` and ``status.readyReplicas``,
    and the RollingUpdate strategy's maxSurge/maxUnavailable resolved to replica counts."""

    generation: int
    observed_generation: int
    replicas: int  # spec.replicas
    updated_replicas: int
    status_replicas: int
    ready_replicas: int
    max_surge: int
    max_unavailable: int

    @property
    def old_pods(self) -> int:
        """Pods that do not run the newest template yet."""
        return max(self.status_replicas - self.updated_replicas, 0)

    @property
    def in_progress(self) -> bool:
        """Pods still run an older template. Not the generation alone: scaling (KEDA, kvpilot's own surge)
        changes spec.replicas and so the generation too, and must never read as a rollout."""
        return self.old_pods > 0


def resolve_int_or_percent(value: int | str | None, total: int, *, round_up: bool, default: str = "25%") -> int:
    """A RollingUpdate maxSurge (``round_up``) or maxUnavailable (down) as a replica count, as the Deployment
    controller resolves it (kubernetes/kubernetes pkg/controller/deployment/util/deployment_util.go
    ResolveFenceposts: intstr.GetScaledValueFromIntOrPercent, surge rounded up, unavailable down; both default to
    25 %)."""
    v: int | str = default if value is None else value
    if isinstance(v, int):
        return max(v, 0)
    text = str(v).strip()
    if text.endswith("%"):
        share = float(text[:-1]) / 100.0
        scaled = share * total
        return max(int(math.ceil(scaled - 1e-9) if round_up else math.floor(scaled + 1e-9)), 0)
    return max(int(text), 0)


@dataclass(frozen=True, slots=True)
class RolloutStatus:
    """A rollout as the control loop sees it at one tick: the arguments of ``surge_replicas`` and what they came
    from (``source``: "kubernetes" for the Deployment's status, "versions" for two versions among the replicas
    kvpilot scrapes)."""

    old_remaining: int
    wave_size: int
    wave_in_progress: bool
    next_wave_in_s: float | None
    source: str
    versions: str = ""


@dataclass(frozen=True, slots=True)
class VersionsSeen:
    """The versions among a deployment's replicas, as ``detectors.rollout.observe`` reads them from FleetState:
    ready replicas per version now, the version that appeared last (None: one version, no rollout), and the
    ready replicas now against the most ready within the detector's window."""

    ready_by_version: dict[str, int]
    new_version: str | None
    ready: int
    peak_ready: int
    text: str = ""
    replicas: int | None = None  # replicas asked for (the scale source's count, loading ones included), if known
    # Ready replicas that discovery stopped listing this tick while the count asked for held (no scale-down within
    # a cold start): drained, as a rolling update's wave drains its old pods. A crashed replica stays listed (its
    # target goes down, its pod restarts in place), so it is not counted here.
    drained: int = 0
    # The count asked for as the stage knows it: ``replicas`` where counted, else what the stage published last.
    # A fall is a scale-down (the planner's, or the surge withdrawn): the replicas it removes are no wave's.
    count: int | None = None

    @property
    def out(self) -> int:
        """Replicas out of service now: the ready deficit against the recent peak, or the replicas asked for that
        are not ready (loading), whichever is more. The peak alone misses a wave that drains one replica as a
        surge replica becomes ready."""
        asked = 0 if self.replicas is None else self.replicas - self.ready
        return max(self.peak_ready - self.ready, asked, 0)

    @property
    def old_remaining(self) -> int:
        return sum(n for v, n in self.ready_by_version.items() if v != self.new_version)


@dataclass
class _Track:
    wave_started: float | None = None  # when the current wave's replicas went out (the ready deficit began)
    wave_size: int = 1  # the most replicas seen out at once during this rollout
    last_old_at: float | None = None  # the last tick an old-version replica was seen serving
    suspected: bool = False  # a drain seen, no second version serving yet: every ready replica may be replaced


class RolloutTracker:
    """Per deployment, from what the loop sees each tick to a ``RolloutStatus`` (or None: no rollout). Remembers
    when the current wave began, so that the next wave's start (when this one is ready, as a Deployment waits
    for readiness) is known one cold start ahead, and the widest wave seen, where the Deployment's strategy is
    not known."""

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}
        # The ready peak a deficit is read against, no higher than the most ready since the count asked for last
        # fell: the rollout detector reads its own the same way.
        self._peaks = ReadyPeaks()

    def forget(self, key: str) -> None:
        self._tracks.pop(key, None)
        self._peaks.forget(key)

    def _peak_since_fall(self, key: str, seen: VersionsSeen) -> int:
        """The ready peak a deficit is read against: the detector's (the most ready within its window), but no
        higher than the most ready since the count asked for last fell (``detectors.rollout.ReadyPeaks``; a
        scale-down's replicas are no wave's: the planner's 18 -> 7 mid-rollout on Azure code x8 was read as a wave
        of 11 in progress, surged to 24 for a planner at 7)."""
        count = seen.count if seen.count is not None else seen.replicas
        return self._peaks.read(key, ready=seen.ready, count=count, window_peak=seen.peak_ready)

    def update(
        self,
        key: str,
        now: float,
        *,
        cold_start_s: float,
        seen: VersionsSeen | None = None,
        deployment: DeploymentRollout | None = None,
    ) -> RolloutStatus | None:
        if seen is not None:  # every tick, so that a fall is seen whichever status the next tick is read from
            seen = dataclasses.replace(seen, peak_ready=max(self._peak_since_fall(key, seen), seen.ready))
        if deployment is not None:  # the Deployment's own status is authoritative where it is read
            return self._from_deployment(key, now, cold_start_s, deployment, seen)
        track = self._tracks.get(key)
        if seen is None:
            self._tracks.pop(key, None)
            return None
        out = seen.out
        # One version left (the old replicas drained and forgotten) reads as none old remaining: the last wave.
        old = seen.old_remaining if seen.new_version is not None else 0
        if seen.new_version is None and seen.drained > 0:
            # The first sign of a rollout from the replicas alone: a ready replica drained while the count asked
            # for held. Its successor loads a cold start before its version is seen serving; until then every
            # ready replica (one version) is one the rollout may still replace.
            track = self._tracks.setdefault(key, _Track())
            track.suspected = True
            track.last_old_at = now
        if seen.new_version is None and track is not None and track.suspected:
            if out == 0:  # the drained replica's successor serves the same version: an eviction, done
                track.suspected = False
            else:
                old = seen.ready
        elif seen.new_version is not None and track is not None:
            track.suspected = False
        if old <= 0:
            # The last wave: its old replicas are gone, its successors may still load. Covered while replicas are
            # out, for at most a cold start after old replicas were last seen serving.
            last = None if track is None else track.last_old_at
            if track is None or last is None or out == 0 or now - last > cold_start_s:
                self._tracks.pop(key, None)
                return None
        else:
            track = self._tracks.setdefault(key, _Track())
            track.last_old_at = now
        # The widest wave is learned from ready replicas lost against the peak only: replicas asked for and still
        # loading include the surge itself, and learning from them would feed the surge back into itself.
        track.wave_size = max(track.wave_size, seen.peak_ready - seen.ready)
        in_progress = out > 0
        if not in_progress:
            track.wave_started = None
        elif track.wave_started is None:
            track.wave_started = now
        return RolloutStatus(
            # the replicas of the wave in progress are still to be replaced until their successors serve
            old_remaining=old + (min(out, track.wave_size) if in_progress else 0),
            wave_size=track.wave_size,
            wave_in_progress=in_progress,
            next_wave_in_s=self._next_wave_in(track, now, cold_start_s),
            source="versions",
            versions=seen.text,
        )

    def _from_deployment(
        self, key: str, now: float, cold_start_s: float, d: DeploymentRollout, seen: VersionsSeen | None
    ) -> RolloutStatus | None:
        track = self._tracks.get(key)
        loading = max(d.status_replicas - d.ready_replicas, 0)
        if d.old_pods > 0:
            track = self._tracks.setdefault(key, _Track())
            track.last_old_at = now
        else:
            # Every pod on the newest template: the last wave's may still load, for at most a cold start after
            # old pods were last seen. Pods loading with no rollout seen before are a scale-up, not a wave.
            last = None if track is None else track.last_old_at
            if track is None or last is None or loading == 0 or now - last > cold_start_s:
                self._tracks.pop(key, None)
                return None
        # The controller replaces up to maxSurge + maxUnavailable pods at once (at least one).
        track.wave_size = max(d.max_surge + d.max_unavailable, 1)
        # A wave loads while pods of the newest template exist and some pod is not ready (or the controller is
        # about to act on a template it has not observed). Pods loading with none on the new template are the
        # surge itself loading ahead of a paused rollout: no wave yet.
        in_progress = (d.updated_replicas > 0 and loading > 0) or d.observed_generation < d.generation
        if not in_progress:
            track.wave_started = None
        elif track.wave_started is None:
            track.wave_started = now
        # Replicas not yet serving the new version: the old pods, or, where a wave drained its old pods before its
        # successors serve (maxUnavailable), the replicas asked for less the new ones ready.
        new_ready = max(d.ready_replicas - d.old_pods, 0)
        return RolloutStatus(
            old_remaining=max(d.old_pods, d.replicas - new_ready),
            wave_size=track.wave_size,
            wave_in_progress=in_progress,
            next_wave_in_s=self._next_wave_in(track, now, cold_start_s),
            source="kubernetes",
            versions=(seen.text if seen is not None else "")
            or f"{d.updated_replicas} of {d.replicas} replicas updated (generation {d.generation})",
        )

    @staticmethod
    def _next_wave_in(track: _Track, now: float, cold_start_s: float) -> float:
        """A wave in progress ends (and the next begins) once its replicas are ready: a cold start after it began.
        With none in progress and old replicas left, the next may begin at any tick."""
        if track.wave_started is None:
            return 0.0
        return max(cold_start_s - (now - track.wave_started), 0.0)


def surge_decision(
    decision: Decision, status: RolloutStatus, *, cold_start_s: float, max_replicas: int | None
) -> Decision:
    """The planner's decision raised by the surge a rollout needs (unchanged when it needs none). The replicas a
    wave is loading are not capacity: ``desired`` stays what demand needs in ready replicas, and the surge adds
    the replicas being replaced on top."""
    target = surge_replicas(
        desired=max(decision.desired_replicas, 0),
        old_remaining=status.old_remaining,
        wave_size=status.wave_size,
        wave_in_progress=status.wave_in_progress,
        next_wave_in_s=status.next_wave_in_s,
        cold_start_s=cold_start_s,
        max_replicas=max_replicas,
    )
    surge = target - max(decision.desired_replicas, 0)
    forecast = {
        **decision.forecast,
        "rollout_old_remaining": float(status.old_remaining),
        "rollout_wave_size": float(status.wave_size),
        "rollout_surge": float(surge),
    }
    if surge <= 0:
        return dataclasses.replace(decision, forecast=forecast)
    wave = "a wave loading now" if status.wave_in_progress else "no wave loading"
    nxt = "" if status.next_wave_in_s is None else f", next wave in ~{status.next_wave_in_s:.0f} s"
    message = (
        f"{decision.message}; rollout surge +{surge} ({status.old_remaining} replicas left to replace in waves of "
        f"{status.wave_size}, {wave}{nxt}; {status.source}: {status.versions})"
    )
    return dataclasses.replace(
        decision, desired_replicas=target, reason="rollout_surge", message=message, forecast=forecast
    )
