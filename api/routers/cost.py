"""What the fleet costs now: dollars per hour and per million output tokens by deployment, the fleet's total, and
the advisory GPU-type options (docs/cost.md)."""

from __future__ import annotations

from fastapi import APIRouter

from api import convert, schemas
from api.deps import Reader, RuntimeDep

router = APIRouter(prefix="/v1/cost", tags=["cost"])


@router.get("", response_model=schemas.FleetCostOut)
def fleet_cost(_: Reader, runtime: RuntimeDep) -> schemas.FleetCostOut:
    snap = runtime.snapshot()
    costs = dict(snap.costs) if snap else {}
    known = [c for c in costs.values() if c.usd_per_hour is not None]
    return schemas.FleetCostOut(
        usd_per_hour=sum(c.usd_per_hour or 0.0 for c in known),
        power_w=sum(c.power_w or 0.0 for c in known),
        unknown=sorted(k for k, c in costs.items() if c.usd_per_hour is None),
        deployments={k: convert.cost(c) for k, c in sorted(costs.items())},
    )
