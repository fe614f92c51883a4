"""FleetConfig: everything that shapes a simulated fleet, validated once at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.profile import ReplicaProfile
from simulator.routing import ROUTERS

FIDELITIES = ("request", "fluid")


@dataclass(frozen=True)
class FleetConfig:
    profile: ReplicaProfile = field(default_factory=ReplicaProfile)
    replicas: int = 4
    cold_start_s: float = 120.0
    routing: str = "round_robin"
    fidelity: str = "request"
    # Both levels are deterministic; the seed that matters is the trace's (load_trace(seed=...)). Kept so that a
    # configuration records the seed it was run with.
    seed: int = 0
    gpus_per_node: int = 8
    deployment: str = "llama"
    namespace: str = "inference"
    # Fluid level: the time step, and the share of prompt tokens served from the prefix cache with
    # prefix-aware routing; None estimates it from the trace's prefix blocks (0.3 for traces held as rates only).
    fluid_step_s: float = 10.0
    fluid_prefix_hit_rate: float | None = None
    # Start the initial replicas ready (a fleet already running when the replay starts).
    start_ready: bool = True
    # Replay the trace again and again (a live fleet that never runs dry); off for backtests.
    loop: bool = False

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"fleet config: replicas must be >= 0, got {self.replicas}")
        if self.cold_start_s < 0:
            raise ValueError(f"fleet config: cold_start_s must be >= 0, got {self.cold_start_s}")
        if self.routing not in ROUTERS:
            raise ValueError(f"fleet config: unknown routing {self.routing!r} (known: {', '.join(ROUTERS)})")
        if self.fidelity not in FIDELITIES:
            raise ValueError(f"fleet config: fidelity must be one of {FIDELITIES}, got {self.fidelity!r}")
        if self.fluid_step_s <= 0:
            raise ValueError(f"fleet config: fluid_step_s must be > 0, got {self.fluid_step_s}")
        if self.fluid_prefix_hit_rate is not None and not 0 <= self.fluid_prefix_hit_rate < 1:
            raise ValueError("fleet config: fluid_prefix_hit_rate must be in [0, 1)")
