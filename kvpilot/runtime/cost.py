"""The cost model `kvpilot run` uses, built from settings: GPU prices, per-deployment GPU types, and the simulator's
calibrated replica profiles as the options a recommendation compares (docs/cost.md)."""

from __future__ import annotations

import logging

from kvpilot.settings import Settings
from scaler.capacity import ServingProfile
from scaler.cost import Candidate, CostConfig, GpuAssignment, GpuPrice, gpu_type_of

log = logging.getLogger(__name__)


def profile_candidates(known_types: list[str]) -> dict[str, tuple[Candidate, ...]]:
    """Every calibrated (or extrapolated) profile of `simulator.PROFILES`, by model name (lower case), as the
    serving profile an operator would configure from a benchmark of that replica (`scaler.backtest.sim`)."""
    from scaler.backtest.sim import serving_profile_fields
    from simulator import PROFILES

    out: dict[str, list[Candidate]] = {}
    for key, p in PROFILES.items():
        gpu_type = gpu_type_of(p.gpu.name, known_types)
        if gpu_type is None:
            log.debug("profile %s: GPU %r has no price; not an option", key, p.gpu.name)
            continue
        serving = ServingProfile(**serving_profile_fields(p))  # type: ignore[arg-type]
        out.setdefault(p.model_name.lower(), []).append(
            Candidate(gpu_type, p.gpus_per_replica, serving, p.max_model_len)
        )
    return {model: tuple(c) for model, c in out.items()}


def cost_config(settings: Settings, *, candidates: bool | None = None) -> CostConfig:
    """`settings.cost` as `scaler.cost.CostConfig`; the planner's target utilisation and TTFT SLO size the options."""
    from kvpilot.runtime.wiring import planner_config

    c = settings.cost
    gpus = {k: GpuPrice(g.price_per_hour_usd, g.power_w) for k, g in c.gpus.items()}
    planner = planner_config(settings, settings.scaler.default)
    with_profiles = c.recommend if candidates is None else candidates
    return CostConfig(
        gpus=gpus,
        default=GpuAssignment(c.default.gpu_type, c.default.gpus_per_replica),
        deployments={k: GpuAssignment(a.gpu_type, a.gpus_per_replica) for k, a in c.deployments.items()},
        candidates=profile_candidates(list(gpus)) if with_profiles else {},
        target_utilisation=planner.policy.target_utilisation,
        slo_ttft_s=planner.slo_ttft_s,
        recommend_margin=c.recommend_margin,
        pools={k: GpuAssignment(p.gpu_type, None) for k, p in settings.scaler.pools.items() if p.gpu_type is not None},
    )
