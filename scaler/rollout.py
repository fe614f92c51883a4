"""Surge during a rolling update: how many replicas to ask for while a rollout replaces the old ones.

A rolling update drains old replicas while new ones load weights; for the length of one cold start per wave the
fleet serves with fewer ready replicas than the planner wanted, and TTFT's tail jumps. The mitigation is a surge:
ask for ``desired`` plus the replicas being replaced, and start that surge one cold start ahead of each wave, so
that by the time a wave drains its old replicas their successors are already warm. A pure function over plain
values, so the planner, the backtest and a test all call the same arithmetic.

``RolloutTracker`` turns what the control loop sees each tick (the versions among a deployment's replicas, and
the Deployment's own rollout status where the scale source reads Kubernetes) into those values, and
``surge_decision`` raises the planner's decision by the surge: the stage ``kvpilot.runtime.loop`` runs after the
planner.
``OwnRemovals`` remembers the pods kvpilot's own actuation removed (a drain's evictions), so that the stage does
not read their disappearance as a rollout wave's drain.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from collector.state import FleetState
from detectors import rollout as rollout_detector
from detectors.thresholds import DEFAULT, Thresholds
from scaler.decision import Decision
from scaler.planner import DeploymentLimits
from scaler.version_speed import SpeedThresholds, SpeedTracker, VersionSpeed, scale_factor, window_running


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

    def forget(self, key: str) -> None:
        self._tracks.pop(key, None)

    def update(
        self,
        key: str,
        now: float,
        *,
        cold_start_s: float,
        seen: VersionsSeen | None = None,
        deployment: DeploymentRollout | None = None,
    ) -> RolloutStatus | None:
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


log = logging.getLogger(__name__)

DEFAULT_COLD_START_S = 120.0
# How long a pod kvpilot itself removed is remembered: longer than an evicted pod takes to leave discovery (its
# termination grace period: Kubernetes' default 30 s, LLM-serving charts often 120-300 s), and bounded, so that a
# pod name reused later (a StatefulSet's) drained by a real rollout is read as one again.
OWN_REMOVAL_MEMORY_S = 600.0


class OwnRemovals:
    """Pods kvpilot's own actuation removed ("namespace/pod", as a drain evicts them and as FleetState keys their
    replicas), each for ``memory_s`` after it was last noted. Noted from the drain worker's thread and read on the
    control loop's, hence the lock."""

    def __init__(self, memory_s: float = OWN_REMOVAL_MEMORY_S) -> None:
        if not (math.isfinite(memory_s) and memory_s > 0):
            raise ValueError(f"OwnRemovals: memory_s must be a finite number > 0, got {memory_s!r}")
        self.memory_s = memory_s
        self._noted: dict[str, float] = {}  # pod -> when kvpilot last removed (or asked to remove) it
        self._lock = threading.Lock()

    def note(self, pod: str, now: float) -> None:
        with self._lock:
            self._noted[pod] = now
            self._expire(now)

    def others(self, gone: Iterable[str], now: float) -> set[str]:
        """The replicas of ``gone`` that kvpilot did not remove (a replica ``pod#group`` is its pod's)."""
        with self._lock:
            self._expire(now)
            own = set(self._noted)
        return {key for key in gone if key.split("#", 1)[0] not in own}

    def _expire(self, now: float) -> None:
        for pod in [p for p, at in self._noted.items() if now - at > self.memory_s]:
            del self._noted[pod]


class RolloutStage:
    """The control loop's rollout stage (``kvpilot.runtime.rollout_stage``): after the planner decides, each
    deployment's decision raised by the surge its rolling update needs. Here, below the composition root, so that the
    backtest runs the same stage."""

    def __init__(
        self,
        thresholds: Thresholds = DEFAULT,
        *,
        own_removal_memory_s: float = OWN_REMOVAL_MEMORY_S,
        speed: SpeedThresholds | None = None,
    ) -> None:
        self.thresholds = thresholds
        self.tracker = RolloutTracker()
        self.own_removals = OwnRemovals(own_removal_memory_s)
        self.speeds = SpeedTracker(speed)
        self._capacity_ref: dict[str, tuple[str, float | None]] = {}  # (new version, learned capacity when first seen)
        self._scaled: dict[str, int] = {}  # the count last published for a slower version, per deployment
        self._surging: set[str] = set()
        self._held: dict[str, int] = {}  # the largest surge published during each deployment's rollout
        self._ready_keys: dict[str, set[str]] = {}  # each deployment's ready replicas at the last tick
        self._asked: dict[str, int] = {}  # the count asked for at the last tick
        self._lowered_at: dict[str, float] = {}  # when the count asked for last fell (a scale-down)

    def forget(self, key: str) -> None:
        self.tracker.forget(key)
        self._surging.discard(key)
        self._held.pop(key, None)
        self._ready_keys.pop(key, None)
        self._asked.pop(key, None)
        self._lowered_at.pop(key, None)
        self.speeds.forget(key)
        self._capacity_ref.pop(key, None)
        self._scaled.pop(key, None)

    def note_removed(self, pod: str, now: float) -> None:
        """kvpilot's own actuation removed ``pod`` ("namespace/name") or is removing it now (a drain's eviction):
        its disappearance within ``own_removal_memory_s`` is not a rollout wave's drain. Safe from any thread."""
        self.own_removals.note(pod, now)

    def _drained(self, view: Any, d: Decision, now: float, cold_start_s: float) -> int:
        """Ready replicas at the last tick that are gone from the fleet now (discovery stopped listing them, so
        FleetState forgot them) while the count asked for did not fall within a cold start: drained, as a rolling
        update's wave drains its old pods. A replica that crashed is still listed (down, restarting in place),
        a scale-down lowers the count first, and a pod kvpilot itself evicted was noted (``note_removed``), so
        none of them counts."""
        key = d.deployment
        asked = d.current_replicas
        before = self._asked.get(key)
        if before is not None and asked < before:
            self._lowered_at[key] = now
        self._asked[key] = asked
        present = {r.key for r in view.replicas} if view is not None else set()
        previous = self._ready_keys.get(key, set())
        self._ready_keys[key] = {r.key for r in view.replicas if r.ready} if view is not None else set()
        lowered = self._lowered_at.get(key)
        if lowered is not None and now - lowered <= cold_start_s:
            return 0
        gone = previous - present
        drained = self.own_removals.others(gone, now)
        if len(drained) < len(gone):
            log.debug("%s: %s removed by kvpilot itself, not a rollout's drain", key, sorted(gone - drained))
        return len(drained)

    def apply(
        self,
        state: FleetState,
        decisions: Sequence[Decision],
        now: float,
        *,
        planner: Any = None,
        deployments: Mapping[str, DeploymentRollout] | None = None,
    ) -> list[Decision]:
        """The decisions, each raised by its deployment's rollout surge (unchanged where none runs).
        ``planner``: where it has ``limits(key)`` (`Planner.limits`), each deployment's cold start and max_replicas
        come from there; ``deployments``: the Deployment objects' rollout status, where the scale source read them."""
        views = state.deployments()
        out: list[Decision] = []
        for d in decisions:
            view = views.get(d.deployment)
            seen = None
            cold_start_s, max_replicas = _limits(planner, d.deployment)
            drained = self._drained(view, d, now, cold_start_s)
            speed: VersionSpeed | None = None
            if view is not None:
                obs = rollout_detector.observe(state, view, self.thresholds, now)
                speed = self.speeds.update(
                    d.deployment, view.replicas, rollout_detector.version, obs.new_version, window_running(state)
                )
                self._note_capacity(planner, d.deployment, obs.new_version)
                # current_replicas: the scale source's count (loading replicas included) where there is one
                seen = VersionsSeen(
                    obs.ready_by_version,
                    obs.new_version,
                    obs.ready,
                    obs.peak_ready,
                    obs.text,
                    d.current_replicas,
                    drained=drained,
                )
            else:  # no replica serves (a one-replica fleet whose only replica drained): what was asked for
                seen = VersionsSeen({}, None, 0, 0, "", d.current_replicas, drained=drained)
                self.speeds.update(d.deployment, (), rollout_detector.version, None)
            d = self._for_speed(d, speed, planner, max_replicas)
            status = self.tracker.update(
                d.deployment,
                now,
                cold_start_s=cold_start_s,
                seen=seen,
                deployment=(deployments or {}).get(d.deployment),
            )
            if status is None:
                self._held.pop(d.deployment, None)
                if d.deployment in self._surging:
                    log.info("%s: rollout done, the surge is withdrawn (desired %d)", d.deployment, d.desired_replicas)
                    self._surging.discard(d.deployment)
                out.append(d)
                continue
            raised = surge_decision(d, status, cold_start_s=cold_start_s, max_replicas=max_replicas)
            # The surge never shrinks while the rollout runs: lowering the count mid-wave deletes a pod that is not
            # ready yet first (a ReplicaSet scales down unready pods first), which is the wave's own successor.
            surge = raised.desired_replicas - d.desired_replicas
            held = max(surge, self._held.get(d.deployment, 0))
            self._held[d.deployment] = held
            if held > surge:
                target = d.desired_replicas + held
                if max_replicas is not None:
                    target = max(d.desired_replicas, min(target, max_replicas))
                raised = dataclasses.replace(
                    raised,
                    desired_replicas=target,
                    reason="rollout_surge",
                    message=raised.message
                    if raised.reason == "rollout_surge"
                    else f"{d.message}; rollout surge held at +{held} until the rollout ends",
                    forecast={**raised.forecast, "rollout_surge": float(target - d.desired_replicas)},
                )
            if raised.desired_replicas > d.desired_replicas and d.deployment not in self._surging:
                log.info("%s: %s", d.deployment, raised.message)
                self._surging.add(d.deployment)
            out.append(raised)
        return out

    def _note_capacity(self, planner: object, key: str, new_version: str | None) -> None:
        """The planner's learned capacity when a new version is first seen serving: what it knew of the old one."""
        if new_version is None or self._capacity_ref.get(key, ("", None))[0] == new_version:
            return
        capacity = _capacity(planner, key)
        learned = capacity[0] if capacity is not None and capacity[1] == "learned" else None
        self._capacity_ref[key] = (new_version, learned)

    def _planner_learnt(self, planner: object, key: str) -> float:
        """The slowdown already in the planner's count (``scale_factor``'s ``planner_learnt``): a configured or
        profiled capacity never moves (1); a learned one, its value when the new version first served over its
        value now; a capacity first learned since, with the new version serving, has learnt it (infinite)."""
        capacity = _capacity(planner, key)
        if capacity is None or capacity[1] != "learned" or capacity[0] <= 0:
            return 1.0
        before = self._capacity_ref.get(key, ("", None))[1]
        return math.inf if before is None else before / capacity[0]

    def _for_speed(
        self, d: Decision, speed: VersionSpeed | None, planner: object, max_replicas: int | None
    ) -> Decision:
        """The planner's decision scaled for a measured slower version, so that the fleet once rolled serves what
        the old one did (unchanged for a faster version, one within noise, or one the planner has learnt)."""
        key = d.deployment
        factor = 1.0 if speed is None else scale_factor(speed, planner_learnt=self._planner_learnt(planner, key))
        if speed is None or factor <= 1.0:
            if self._scaled.pop(key, None) is not None:
                log.info("%s: the count is no longer scaled for a slower version (desired %d)", key, d.desired_replicas)
            return d
        desired = max(d.desired_replicas, 0)
        # To the nearest replica, at least one more: the ratio is known to within its noise (single comparisons
        # 1.1-1.45 on Azure code for a true 1.25), so a ceiling would add a replica for the noise; the planner's
        # target utilisation is the headroom below what a replica serves at saturation.
        target = max(desired + 1, math.floor(desired * factor + 0.5)) if desired > 0 else 0
        if max_replicas is not None:
            target = max(desired, min(target, max_replicas))
        forecast = {**d.forecast, "version_speed_ratio": speed.ratio, "version_scale": factor}
        if target <= desired:
            return dataclasses.replace(d, forecast=forecast)
        message = (
            f"{d.message}; slower version: {speed.text}; count scaled by {factor:.2f} ({desired} -> {target}) so that "
            f"the fleet serves what the version it was sized for did"
        )
        if self._scaled.get(key) != target:
            log.warning("%s: %s", key, message)
            self._scaled[key] = target
        return dataclasses.replace(
            d, desired_replicas=target, reason="version_slower", message=message, forecast=forecast
        )


@runtime_checkable
class _KnowsLimits(Protocol):
    def limits(self, key: str) -> DeploymentLimits: ...


@runtime_checkable
class _KnowsCapacity(Protocol):
    def capacity(self, key: str) -> tuple[float, str] | None: ...


def _capacity(planner: object, key: str) -> tuple[float, str] | None:
    """A deployment's per-replica capacity at the reference mix and its source (``Planner.capacity``), where the
    planner tells it."""
    return planner.capacity(key) if isinstance(planner, _KnowsCapacity) else None


def _limits(planner: object, key: str) -> tuple[float, int | None]:
    """(cold start, max_replicas) of a deployment from its planner's ``limits`` (`Planner`, `PooledPlanner`), where
    it has one, else the defaults."""
    if not isinstance(planner, _KnowsLimits):
        return DEFAULT_COLD_START_S, None
    limits = planner.limits(key)
    return float(limits.cold_start_s), limits.max_replicas
