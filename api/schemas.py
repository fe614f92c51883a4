"""The API's request and response bodies (Pydantic), kept apart from the store's tables and the domain types;
``api.convert`` builds them."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from store.fields import TEXT_MAX, NodeName, TargetSpec, Text

T = TypeVar("T")


class Out(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="null")


class In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Page(Out, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int
    next_offset: int | None


class CursorPage(Out, Generic[T]):
    """A page of a list that only grows (decisions): no total, and the next page asked for by ``cursor``."""

    items: list[T]
    limit: int
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last one")


class Error(Out):
    detail: str | list[Any]


class Health(Out):
    status: Literal["ok", "not ready"]
    checks: dict[str, bool]
    store_pending_writes: int
    store_dropped_writes: int
    store_error: str | None
    last_tick_at: float | None
    leader: bool


class DecisionOut(Out):
    deployment: str
    timestamp: float
    current_replicas: int
    ready_replicas: int
    desired_replicas: int
    warm_pool: int
    reason: str
    message: str
    predictive_replicas: int | None
    reactive_replicas: int | None
    forecast: dict[str, float | None]


class ReplicaOut(Out):
    key: str
    deployment: str
    replica: str
    node: str
    engine: str
    model: str | None
    ready: bool
    target_up: bool
    last_seen: float
    requests_waiting: float | None
    requests_running: float | None
    kv_usage: float | None
    arrival_rate: float | None
    prefix_hit_ratio: float | None
    preemptions_rate: float | None
    prompt_tokens_rate: float | None
    generation_tokens_rate: float | None
    gpus: list[str]


class GpuOptionOut(Out):
    gpu_type: str
    gpus_per_replica: int
    replicas: int  # to serve the current demand at the planner's target utilisation, per the type's profile
    usd_per_hour: float
    meets_slo: bool
    why: str


class RecommendationOut(Out):
    """Advisory only: kvpilot never changes a deployment's GPU type."""

    current: GpuOptionOut | None
    recommended: GpuOptionOut | None  # a cheaper type that meets the SLO, when it saves at least the margin
    options: list[GpuOptionOut]
    message: str


class CostOut(Out):
    pool: str | None
    gpu_type: str | None
    gpu_type_source: str  # settings | gpu exporter | unknown
    gpus_per_replica: int
    gpus_per_replica_source: str  # settings | gpu exporter | assumed
    replicas: int
    price_per_gpu_hour_usd: float | None
    usd_per_hour: float | None
    usd_per_million_tokens: float | None  # output tokens, at the current generation rate
    power_w: float | None  # the GPUs' datasheet board power at full load
    problem: str | None  # why the cost is unknown, or why its GPUs per replica are assumed (a shared node)
    recommendation: RecommendationOut | None


class FleetCostOut(Out):
    usd_per_hour: float  # over the deployments whose cost is known
    power_w: float
    unknown: list[str]  # deployments whose GPU type is unknown (see their `problem`)
    deployments: dict[str, CostOut]


class DeploymentSummary(Out):
    key: str  # namespace/name, or namespace/name@prefill (@decode) for a disaggregated deployment's pools
    namespace: str
    name: str
    pool: str = "both"  # prefill | decode | both (co-located); docs/disaggregated.md
    live: bool  # seen in the latest tick
    replicas: int
    # The deployment's signals (collector.state.DeploymentSignals, every one of them: a test checks the two lists)
    ready_replicas: int
    requests_waiting: float | None
    requests_running: float | None
    kv_usage_mean: float | None
    kv_usage_max: float | None
    arrival_rate: float | None
    prompt_tokens_rate: float | None
    generation_tokens_rate: float | None
    prefix_hit_ratio: float | None
    preemptions_rate: float | None
    desired_replicas: int | None
    first_seen: float | None
    last_seen: float | None
    cost: CostOut | None = None  # live deployments only


class FindingOut(Out):
    id: str
    kind: str
    severity: str
    state: str
    deployment: str
    replica: str
    node: str
    gpu: str
    since: float
    last_seen: float | None
    closed_at: float | None
    summary: str
    action: str
    evidence: dict[str, float | str | None]
    acknowledged_at: float | None
    acknowledged_by: str | None
    acknowledge_note: str | None


class HistoryPoint(Out):
    t: float  # start of the minute, epoch seconds
    samples: int  # ticks folded into the minute
    values: dict[str, float | None]  # per-minute means (kv_usage_max: the maximum)


class DeploymentDetail(Out):
    deployment: DeploymentSummary
    decision: DecisionOut | None
    replicas: list[ReplicaOut]
    findings: list[FindingOut]


class GpuOut(Out):
    key: str
    node: str
    index: str
    uuid: str | None
    model_name: str | None
    present: bool
    last_seen: float
    replica: str | None
    utilisation: float | None
    memory_used_bytes: float | None
    memory_free_bytes: float | None
    temperature_c: float | None
    power_w: float | None
    last_xid: int | None
    xid_class: str


class TargetIn(In, TargetSpec):
    """Checked as the configuration file's targets are (``store.fields.TargetSpec``): Kubernetes names, an http(s)
    URL with a host, a valid port and no credentials, a known engine."""


class TargetOut(Out):
    url: str
    kind: str
    engine: str | None
    namespace: str
    deployment: str
    pod: str
    node: str
    static: bool  # added through the API or the config file (removable), as opposed to discovered
    up: bool | None
    last_error: str | None
    last_scrape_ts: float | None
    last_scrape_duration_s: float | None
    consecutive_failures: int
    # pages read in part since the target was discovered: a bad sample line cost its family (last_error names it)
    partial_pages_total: int


class AcknowledgeIn(In):
    note: Text = Field(default="", max_length=TEXT_MAX)


class DrainIn(In):
    node: NodeName = Field(min_length=1)
    reason: Text = Field(default="", max_length=TEXT_MAX)


class DrainTransitionIn(In):
    message: Text = Field(default="", max_length=TEXT_MAX)


class DrainApproveIn(DrainTransitionIn):
    over_budget: bool = Field(
        default=False,
        description="Approve past drains.budget (never past drains.max_concurrent); the approval's audit event says so",
    )


class DrainEventOut(Out):
    at: float
    from_state: str | None
    to_state: str
    actor: str
    message: str


class DrainOut(Out):
    id: int
    node: str
    state: str
    dry_run: bool
    requested_by: str
    requested_at: float
    updated_at: float
    reason: str
    finding_id: str | None
    events: list[DrainEventOut] = []
