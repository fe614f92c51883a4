"""The JSON endpoint behind KEDA's `metrics-api` trigger: the latest decision for one deployment.

`GET /v1/keda/{namespace}/{name}` answers, for example,
`{"deployment": "llm/chat", "replicas": 7, "desiredReplicas": 5, "warmPool": 2, "arrivalRate": 4.5, ...}`.
Point the trigger's `valueLocation` at `replicas` (desired + warm pool) or `desiredReplicas`, with
`targetValue: "1"`: the HPA's AverageValue arithmetic, ceil(value / 1), then asks for exactly that many
replicas (docs/keda.md). It reads through the same ``scaler.keda.reader.DecisionReader`` object as the gRPC
scaler (`create_app(keda_reader=...)`: `kvpilot run` hands both the one over the loop's decision board and clock,
limited by `Settings.decision_stale_after_s`), so both give the same answer: a deployment without a decision (never
decided, or deleted and forgotten) is a 404 (gRPC NOT_FOUND); a decision older than the staleness limit is a 503
(gRPC UNAVAILABLE), so KEDA's `fallback` applies rather than a frozen number. An app built without a reader answers
404.
Reads need a read token like the rest of the API (KEDA: `authMode: bearer`).
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api.deps import Reader
from scaler.keda.reader import DecisionReader, NoDecision, StaleDecision
from scaler.keda.target import NAME_PATTERN, NAMESPACE_PATTERN
from scaler.publish import scale_target

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


def _reader(request: Request) -> DecisionReader | None:
    reader: DecisionReader | None = getattr(request.app.state, "keda_reader", None)
    return reader


ReaderDep = Annotated[DecisionReader | None, Depends(_reader)]


@router.get(
    "/{namespace}/{name}",
    response_model=KedaMetrics,
    response_model_by_alias=True,
    responses={404: {"description": "no decision for this deployment"}, 503: {"description": "decision stale"}},
)
def keda_metrics(
    namespace: Annotated[str, Path(max_length=63, pattern=f"^{NAMESPACE_PATTERN}$")],
    name: Annotated[str, Path(max_length=253, pattern=f"^{NAME_PATTERN}$")],
    _: Reader,
    reader: ReaderDep,
) -> KedaMetrics:
    """The latest decision for deployment `namespace/name`, for KEDA's `metrics-api` trigger."""
    deployment = f"{namespace}/{name}"
    if reader is None:  # an app `kvpilot run` did not wire reads no decisions (the API's tests)
        raise HTTPException(status_code=404, detail=f"kvpilot has no decision for deployment {deployment}: no reader")
    try:
        published, age_s = reader.read(deployment)
    except NoDecision as missing:
        raise HTTPException(status_code=404, detail=str(missing)) from None
    except StaleDecision as stale:
        raise HTTPException(status_code=503, detail=str(stale)) from None
    decision = published.decision
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
