"""The JSON endpoint behind KEDA's `metrics-api` trigger: the latest decision for one deployment.

`GET /v1/keda/{namespace}/{name}` answers, for example,
`{"deployment": "llm/chat", "replicas": 7, "desiredReplicas": 5, "warmPool": 2, "arrivalRate": 4.5, ...}`.
Point the trigger's `valueLocation` at `replicas` (desired + warm pool) or `desiredReplicas`, with
`targetValue: "1"`: the HPA's AverageValue arithmetic, ceil(value / 1), then asks for exactly that many
replicas (docs/keda.md). A deployment without a decision (never decided, or deleted and forgotten) is a 404; a
decision older than the staleness limit is a 503, so KEDA's `fallback` applies rather than a frozen number. The
limit is `app.state.decision_stale_after_s`, which `kvpilot run` sets to the gRPC scaler's own
(`Settings.decision_stale_after_s`: keda.stale_after_ticks loop intervals; 0 disables). It measures the control
loop's liveness: a deployment at zero replicas, or loading replicas after scale-from-zero, is decided every tick
and stays fresh. Reads need a read token like the rest of the API (KEDA: `authMode: bearer`).
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api.deps import Reader, RuntimeDep
from scaler.publish import scale_target

DEFAULT_STALE_AFTER_S = 30.0  # the default settings' limit: 6 ticks of 5 s (kvpilot run sets it explicitly)
_NAMESPACE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"

router = APIRouter(prefix="/v1/keda", tags=["keda"])


class KedaMetrics(BaseModel):
    """One deployment's decision, flattened for KEDA's `valueLocation` (GJSON paths)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    deployment: str = Field(description="namespace/name")
    replicas: int = Field(description="desired + warm pool: the count to run now (valueLocation: replicas)")
    desired_replicas: int = Field(description="what current demand needs")
    warm_pool: int = Field(description="extra replicas loading now for the demand one cold start ahead")
    current_replicas: int
    ready_replicas: int
    arrival_rate: float | None = Field(description="forecast requests/s, when the policy reported one")
    reason: str
    message: str
    timestamp: float = Field(description="when the decision was made, seconds since the epoch")
    age_seconds: float
    forecast: dict[str, float]


def _stale_after_s(request: Request) -> float:
    return float(getattr(request.app.state, "decision_stale_after_s", DEFAULT_STALE_AFTER_S))


StaleAfterDep = Annotated[float, Depends(_stale_after_s)]


@router.get(
    "/{namespace}/{name}",
    response_model=KedaMetrics,
    response_model_by_alias=True,
    responses={404: {"description": "no decision for this deployment"}, 503: {"description": "decision stale"}},
)
def keda_metrics(
    namespace: Annotated[str, Path(max_length=63, pattern=_NAMESPACE)],
    name: Annotated[str, Path(max_length=253, pattern=_NAME)],
    _: Reader,
    runtime: RuntimeDep,
    stale_after_s: StaleAfterDep,
) -> KedaMetrics:
    """The latest decision for deployment `namespace/name`, for KEDA's `metrics-api` trigger."""
    deployment = f"{namespace}/{name}"
    snapshot = runtime.snapshot()
    if snapshot is None:
        raise HTTPException(status_code=503, detail="kvpilot is starting: no tick has completed yet")
    decision = snapshot.decisions.get(deployment)
    if decision is None:
        raise HTTPException(status_code=404, detail=f"kvpilot has no decision for deployment {deployment}")
    age_s = runtime.now() - decision.timestamp
    if stale_after_s and age_s > stale_after_s:
        raise HTTPException(
            status_code=503,
            detail=f"the decision for {deployment} is {age_s:.0f} s old (limit {stale_after_s:g} s)",
        )
    # JSON has no NaN/Infinity: a forecaster's non-finite output is left out rather than breaking the answer
    forecast = {key: value for key, value in decision.forecast.items() if math.isfinite(value)}
    return KedaMetrics(
        deployment=deployment,
        replicas=scale_target(decision),
        desired_replicas=max(decision.desired_replicas, 0),
        warm_pool=max(decision.warm_pool, 0),
        current_replicas=decision.current_replicas,
        ready_replicas=decision.ready_replicas,
        arrival_rate=forecast.get("arrival_rate"),
        reason=decision.reason,
        message=decision.message,
        timestamp=decision.timestamp,
        age_seconds=max(age_s, 0.0),
        forecast=forecast,
    )
