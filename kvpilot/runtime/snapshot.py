"""The fleet as of one completed tick: what the control loop publishes, and what the API, actuation and the demo read.

The loop builds one immutable ``Snapshot`` per tick; readers take whichever is current, never a half-built one. The
runtime owns it; the API reads it through its ``Runtime`` protocol (``api/runtime.py``), so this module imports
nothing of the runtime, the API or the store (import-linter keeps it so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from collector.health import TargetHealth
from collector.samples import TargetInfo
from collector.state import DeploymentView, GpuView, ReplicaView
from detectors.finding import Finding
from scaler.cost import DeploymentCost
from scaler.decision import Decision


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The fleet as of one completed tick."""

    tick: int
    t: float
    deployments: Mapping[str, DeploymentView] = field(default_factory=dict)
    replicas: Sequence[ReplicaView] = ()
    gpus: Sequence[GpuView] = ()
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    findings: Sequence[Finding] = ()
    targets: Sequence[TargetInfo] = ()
    target_health: Mapping[str, TargetHealth] = field(default_factory=dict)
    node_drains: Mapping[str, str] = field(default_factory=dict)  # node -> drain state, for live drains
    kv_time_to_exhaustion: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (deployment, replica)
    costs: Mapping[str, DeploymentCost] = field(default_factory=dict)  # deployment -> cost now (scaler.cost)
