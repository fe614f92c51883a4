"""The control loop's rollout stage on a planner that holds a fixed count, driven from a simulated fleet: each tick
the ready replicas' series (ITL included) observed by a real FleetState, discovery's listing (every pod but a
draining one), and what a scale source reads of the Deployment (bench/rollout.py's ``ScaleReader``) where given.
For tests of the stage's own arithmetic on the simulator; bench/rollout.py's kvpilot modes run the real planner
instead (``replay_kvpilot``)."""

from __future__ import annotations

from typing import Any

from collector.state import FleetState
from kvpilot.commands.detect import samples_from_snapshot
from scaler.backtest.policies.kvpilot import DEPLOYMENT, NAME, NAMESPACE
from scaler.decision import Decision
from scaler.rollout_stage import RolloutStage

TICK_S = 5.0
KEY = DEPLOYMENT


class StageDriver:
    """What the stage publishes each tick on top of a planner that holds ``desired``, applied to the fleet as KEDA
    would (spec.replicas = desired); ``published``: (time, count) at each change."""

    def __init__(self, desired: int, *, scale_read: Any = None) -> None:
        self.desired = desired
        self.scale_read = scale_read
        self.state = FleetState(stale_after_s=3 * TICK_S, forget_after_s=3600)
        self.stage = RolloutStage()
        self.listed: set[str] = set()
        self.published: list[tuple[float, int]] = []

    def tick(self, fleet: Any, snap: Any, t: float) -> None:
        ready = {r.name for r in snap.replicas if r.state == "ready"}
        samples, _, _ = samples_from_snapshot(snap, now=t, namespace=NAMESPACE, deployment=NAME)
        # Discovery lists every pod but a terminating one (a draining replica leaves the endpoints at once); a
        # crashed replica restarts in place, listed, its target down while it loads.
        listed = {r.name for r in snap.replicas if r.state != "draining"}
        departed = {f"{NAMESPACE}/{n}" for n in self.listed - listed}
        self.listed = listed
        self.state.observe(
            [s for s in samples if s.replica in ready], [], now=t, gpu_nodes_scraped=set(), departed=departed
        )
        spec = len(listed)
        deployments, current = self.scale_read(snap, t) if self.scale_read is not None else (None, None)
        current = spec if current is None else current
        planned = Decision(KEY, t, current, len(ready), self.desired, 0, "predictive", "steady demand")
        (decision,) = self.stage.apply(self.state, [planned], t, deployments=deployments)
        if not self.published or self.published[-1][1] != decision.desired_replicas:
            self.published.append((t, decision.desired_replicas))
        if decision.desired_replicas != spec:
            fleet.set_replicas(decision.desired_replicas)
