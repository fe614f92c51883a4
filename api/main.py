"""Assembles the HTTP API from its routers; nothing else lives here."""

from __future__ import annotations

from fastapi import FastAPI

from api import errors
from api.allow import AllowAllMethods
from api.auth import TokenAuth
from api.deadline import RequestDeadline
from api.exposition import AuthRefusals, WritesRefused
from api.head import HeadAsGet
from api.limits import BodySizeLimit
from api.routers import (
    cost,
    decisions,
    deployments,
    drains,
    findings,
    gpus,
    health,
    metrics,
    metrics_api,
    replicas,
    targets,
)
from api.runtime import Runtime
from scaler.keda.reader import DecisionReader
from store.writers import gate_of

ROUTERS = (health, metrics, deployments, replicas, gpus, targets, findings, decisions, drains, metrics_api, cost)


def create_app(
    runtime: Runtime, auth: TokenAuth, *, keda_reader: DecisionReader | None = None, request_timeout_s: float = 10.0
) -> FastAPI:
    """``keda_reader``: the decisions the metrics-api route answers from (`kvpilot run` hands it the reader the KEDA
    gRPC servicer reads); without one that route answers 404."""
    app = FastAPI(
        title="kvpilot",
        summary="Observability and predictive autoscaling for LLM inference fleets",
        version="1",
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.runtime = runtime
    app.state.auth = auth
    app.state.keda_reader = keda_reader
    runtime.registry.register(AuthRefusals(auth))
    gate = gate_of(runtime.sessions)  # SQLite's writer gate; PostgreSQL has none
    if gate is not None:
        runtime.registry.register(WritesRefused(gate))
    errors.install(app)
    for module in ROUTERS:
        app.include_router(module.router)
    app.add_middleware(BodySizeLimit, max_bytes=runtime.settings_max_body_bytes)
    app.add_middleware(RequestDeadline, timeout_s=request_timeout_s)
    app.add_middleware(HeadAsGet)
    app.add_middleware(AllowAllMethods, routes=app.router.routes)
    return app
