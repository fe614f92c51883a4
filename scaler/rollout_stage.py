"""The control loop's rollout stage: after the planner decides, raise each deployment's decision by the surge its
rolling update needs (issue 16), and scale it for a measured slower new version.

A rolling update drains old replicas while their successors load weights; for a cold start per wave the fleet
serves with fewer ready replicas than the planner asked for. The stage reads what the loop knows of a rollout —
the versions among the replicas it scrapes (``detectors.rollout.observe``: two versions, which one is new, the
ready deficit against the recent peak) and, where the scale source reads Kubernetes, the Deployment's own
status (generation/observedGeneration, updatedReplicas, the strategy's maxSurge + maxUnavailable) — turns it into
``scaler.rollout.RolloutStatus`` and publishes ``surge_replicas``: desired plus the replicas a wave is loading
(not capacity yet) plus the next wave's, once it is within a cold start. When the rollout is done the surge goes
and the planner's own count is published again. Before the surge, a new version measured slower than the old one
(``scaler.version_speed``) scales the planner's count by the ratio (from the rollout's end where it was measured
only once the old version had left). The planner (``scaler.planner``) is not
touched: this is a stage after it.

From the replicas alone, a ready replica that discovery stops listing while the count asked for holds reads as a
wave's drain — unless kvpilot removed it itself: the drain actuator tells the stage each pod it evicts
(``RolloutStage.note_removed``, wired in ``kvpilot.runtime.wiring``; the demo's stand-in eviction calls it too),
and such a disappearance within ``OWN_REMOVAL_MEMORY_S`` raises no surge (``OwnRemovals``).

Here, below the composition root, so that the backtest (``scaler.backtest.run``) replays the same stage the control
loop (``kvpilot.runtime.loop``) runs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from collector.state import FleetState
from detectors import rollout as rollout_detector
from detectors.thresholds import DEFAULT, Thresholds
from scaler.decision import Decision
from scaler.planner import DeploymentLimits
from scaler.rollout import DeploymentRollout, RolloutTracker, VersionsSeen, surge_decision
from scaler.version_speed import SpeedThresholds, SpeedTracker, VersionSpeed, scale_factor, settled_windows

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
    """After the planner decides, each deployment's decision scaled for a slower new version and raised by the surge
    its rolling update needs; one per control loop or backtest replay, remembering each deployment across ticks."""

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
        self._published: dict[str, int] = {}  # the count this stage published at the last tick
        self._lowered_at: dict[str, float] = {}  # when the count asked for last fell (a scale-down)

    def forget(self, key: str) -> None:
        self.tracker.forget(key)
        self._surging.discard(key)
        self._held.pop(key, None)
        self._ready_keys.pop(key, None)
        self._asked.pop(key, None)
        self._published.pop(key, None)
        self._lowered_at.pop(key, None)
        self.speeds.forget(key)
        self._capacity_ref.pop(key, None)
        self._scaled.pop(key, None)

    def replicas_asked(self, read: Mapping[str, int] | None) -> dict[str, int]:
        """The count of replicas asked for per deployment as the next ``apply`` reads it (``VersionsSeen.count``): the
        scale source's (``read``, what ``apply`` gets as each decision's ``current_replicas``) where it counts them,
        else what this stage published last. The control loop hands it to the rollout detector before its tick, so
        that both read a ready deficit against the same peak (``detectors.rollout.ReadyPeaks``)."""
        return dict(read) if read is not None else dict(self._published)

    def note_removed(self, pod: str, now: float) -> None:
        """kvpilot's own actuation removed ``pod`` ("namespace/name") or is removing it now (a drain's eviction):
        its disappearance within ``own_removal_memory_s`` is not a rollout wave's drain. Safe from any thread.
        ``now`` on the time ``apply`` is given as ``timer_now`` (the control loop's ``timer_now()``)."""
        self.own_removals.note(pod, now)

    def _drained(self, view: Any, key: str, asked: int, now: float, cold_start_s: float) -> int:
        """Ready replicas at the last tick that are gone from the fleet now (discovery stopped listing them, so
        FleetState forgot them) while the count asked for did not fall within a cold start: drained, as a rolling
        update's wave drains its old pods. A replica that crashed is still listed (down, restarting in place),
        a scale-down lowers the count first, and a pod kvpilot itself evicted was noted (``note_removed``), so
        none of them counts."""
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
        counted: bool = True,
        timer_now: float | None = None,
    ) -> list[Decision]:
        """The decisions, each raised by its deployment's rollout surge (unchanged where none runs).
        ``planner``: where it has ``limits(key)`` (`Planner.limits`), each deployment's cold start and max_replicas
        come from there; ``deployments``: the Deployment objects' rollout status, where the scale source read them.
        ``counted``: each decision's ``current_replicas`` is the count of replicas asked for, loading ones included
        (a scale source's; the backtest's simulator). False where nobody counts them (no scale source: the planner
        counted the replicas the collector sees, drained ones still listed included): the count asked for is then
        what this stage published last, and the replicas loading are not known (``VersionsSeen.replicas`` None).
        ``timer_now``: the time this stage's own timers run on (a wave's cold start, the last old replica seen, a
        scale-down's, a pod kvpilot removed): the control loop's step-free time (``collector.clock.StepFreeTime``),
        so that a step of the wall clock neither holds a finished rollout's surge for the step nor ends one early;
        None: ``now``. ``now`` stays the wall time the collector stamps FleetState's history with (the rollout
        detector's recent peak, the version speeds)."""
        timer = now if timer_now is None else timer_now
        views = state.deployments()
        out: list[Decision] = []
        for d in decisions:
            view = views.get(d.deployment)
            seen = None
            cold_start_s, max_replicas = _limits(planner, d.deployment)
            # the replicas asked for, loading ones included, where they are counted (uncounted: a scale-down is
            # what this stage published falling)
            asked = d.current_replicas if counted else None
            lowers = asked if asked is not None else self._published.get(d.deployment, d.desired_replicas)
            drained = self._drained(view, d.deployment, lowers, timer, cold_start_s)
            speed: VersionSpeed | None = None
            if view is not None:
                obs = rollout_detector.observe(state, view, self.thresholds, now)
                speed = self.speeds.update(
                    d.deployment,
                    view.replicas,
                    rollout_detector.version,
                    obs.new_version,
                    settled_windows(state, self.speeds.thresholds.settle_s),
                )
                self._note_capacity(planner, d.deployment, obs.new_version)
                seen = VersionsSeen(
                    obs.ready_by_version,
                    obs.new_version,
                    obs.ready,
                    obs.peak_ready,
                    obs.text,
                    asked,
                    drained=drained,
                    count=lowers,
                )
            else:  # no replica listed (a wave drained every one: a one-replica fleet, or maxUnavailable 100 %)
                # The ready peak is the window's history, as the detector reads it, and no lower than the replicas
                # this tick drained: read as 0, a wave of 64 of 64 was a wave of 1, surged +1.
                since = now - self.thresholds.rollout.window_s
                history = (p.ready_replicas for p in state.deployment_history_since(d.deployment, since))
                peak = max(history, default=drained)
                seen = VersionsSeen({}, None, 0, max(peak, drained), "", asked, drained=drained, count=lowers)
                self.speeds.update(d.deployment, (), rollout_detector.version, None)
            status = self.tracker.update(
                d.deployment,
                timer,
                cold_start_s=cold_start_s,
                seen=seen,
                deployment=(deployments or {}).get(d.deployment),
            )
            if status is not None and speed is not None and speed.recorded:
                # Measured only once the old version had left: what still rolls is the last wave's successors
                # loading, which the held surge covers; the scaled count applies from the rollout's end (scaling now
                # would ask for replicas on top of the surge that load only to be deleted unready when it ends).
                speed = None
            d = self._for_speed(d, speed, planner, max_replicas)
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
        for d in out:
            self._published[d.deployment] = d.desired_replicas
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
