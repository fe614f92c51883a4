"""A rolling update in `kvpilot demo` (issue 16): when the rollout ran, how the requests that arrived during it fared
beside the equal window just before it, and what kvpilot's surge cost.

The window is the backtest's (``scaler.backtest.run``): from the tick the simulator's `rollout` fault is injected to
the first tick at which every replica serves the new version and is ready; its TTFT is ``scaler.backtest.result``'s
``ttft_stats`` over the requests that arrived in it, a request still without a first token at the end counted with
its wait and outside the SLO. The surge is what the control loop's rollout stage (``scaler.rollout_stage``) added to
the planner's count, as it records it in each decision (``forecast["rollout_surge"]``), integrated over the ticks it
was published: replica-hours asked for above the planner alone. ``SurgeOff`` is the same stage publishing the
planner's count instead (`kvpilot demo --no-surge`), so that two runs compare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.state import FleetState
from scaler.backtest.result import RolloutWindow
from scaler.backtest.run import measure_window
from scaler.backtest.sim import ROLLOUT_MODEL
from scaler.decision import Decision
from scaler.rollout import DeploymentRollout
from scaler.rollout_stage import RolloutStage


def rollout_body(*, wave_size: int, speed: float) -> dict[str, Any]:
    """The simulator's control-API body of the rollout the backtest injects (``scaler.backtest.sim.rollout_fault``):
    maxSurge 0, waves of ``wave_size``, the new version named ROLLOUT_MODEL with step times divided by ``speed``."""
    return {"type": "rollout", "wave_size": wave_size, "model_name": ROLLOUT_MODEL, "speed": speed}


def surge_now(decisions: Mapping[str, Decision]) -> int:
    """Replicas the rollout stage adds to the planner's count in the decisions published now (summed)."""
    return sum(max(0, round(d.forecast.get("rollout_surge", 0.0))) for d in decisions.values())


@dataclass
class RolloutReport:
    """The demo summary's `rollout` section."""

    at_s: float  # asked for (--rollout-at)
    wave: int
    speed: float
    surge: bool  # the rollout stage's surge on (False: --no-surge)
    window: RolloutWindow | None = None  # None: never injected (the replay ended first)
    ended: bool = False  # every replica rolled before the replay ended (else the window ends with the replay)
    before: RolloutWindow | None = None  # the window of equal length just before it
    peak_surge_replicas: int = 0
    surge_replica_hours: float = 0.0
    finding_after_s: float | None = None  # the first rollout finding, after the injection
    ticks: list[tuple[float, int]] = field(default_factory=list)  # (t, surge published) while it was > 0

    def observe_surge(self, t: float, surge: int, interval_s: float) -> None:
        if surge <= 0:
            return
        self.ticks.append((t, surge))
        self.peak_surge_replicas = max(self.peak_surge_replicas, surge)
        self.surge_replica_hours += surge * interval_s / 3600

    def to_json(self) -> dict[str, Any]:
        return {
            "at_s": self.at_s,
            "wave": self.wave,
            "speed": self.speed,
            "surge": self.surge,
            "window": None if self.window is None else self.window.to_json(),
            "ended": self.ended,
            "before": None if self.before is None else self.before.to_json(),
            "finding_after_s": self.finding_after_s,
            "peak_surge_replicas": self.peak_surge_replicas,
            "surge_replica_hours": round(self.surge_replica_hours, 4),
        }


def measure(report: RolloutReport, fleet: Any, trace: Any, *, now: float, slo_s: float) -> None:
    """Fill the window's and the window before it's TTFT from the fleet at the end of the replay."""
    w = report.window
    if w is None:
        return
    length = w.end_s - w.start_s
    report.before = RolloutWindow(max(0.0, w.start_s - length), w.start_s)
    for window in (w, report.before):
        measure_window(window, fleet, trace, now=now, slo_s=slo_s)


class SurgeOff(RolloutStage):
    """The control loop's rollout stage with its surge withdrawn: each decision the stage raised for a rolling update
    goes out at the count it had before the surge (a slower version's scaling kept). What `--no-surge` runs."""

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
        out = []
        raised = super().apply(
            state, decisions, now, planner=planner, deployments=deployments, counted=counted, timer_now=timer_now
        )
        for planned, d in zip(decisions, raised, strict=True):
            surge = round(d.forecast.get("rollout_surge", 0.0))
            if d.reason != "rollout_surge" or surge <= 0:
                out.append(d)
                continue
            out.append(
                dataclasses.replace(
                    d,
                    desired_replicas=d.desired_replicas - surge,
                    reason=planned.reason,
                    message=f"{planned.message}; rollout surge of +{surge} not applied (--no-surge)",
                    forecast={**d.forecast, "rollout_surge": 0.0},
                )
            )
        return out
