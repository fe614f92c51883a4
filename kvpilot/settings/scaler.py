"""`scaler`: how replica counts are decided — the planner's choices, each deployment's bounds and serving profile,
and the pools of disaggregated deployments."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvpilot.settings._section import _Section


class ServingProfileSettings(_Section):
    """What one replica does, from a benchmark of it (see docs/scaling.md, "Capacity"): turns any token mix into
    requests/s, so that capacity is known before the first burst."""

    prefill_tokens_per_s: float = Field(gt=0, description="Uncached prompt tokens/s at full compute.")
    decode_step_s: float = Field(gt=0, description="Inter-token latency with one sequence, s.")
    decode_tokens_per_s: float = Field(gt=0, description="Output tokens/s with a full batch of short sequences.")
    kv_tokens: float = Field(
        gt=0, description="The KV pool in tokens (vllm:cache_config_info, or the engine's start-up log)."
    )
    max_num_seqs: int = Field(
        default=256, ge=1, description="Sequences one replica batches at most (vLLM `--max-num-seqs`)."
    )
    kv_read_tokens_per_s: float | None = Field(
        default=None, gt=0, description="KV tokens read per second: HBM bandwidth / KV bytes per token."
    )


# A replica count Kubernetes holds: a Deployment's spec.replicas and KEDA's maxReplicaCount are int32. A bound past it
# was accepted (max_replicas: 1e32 as digits), and a min_replicas past it asked for a count no store column, KEDA field
# or scale subresource takes: every decision's write refused, GetMetrics failing.
MAX_REPLICAS = 2**31 - 1


class DeploymentScaling(_Section):
    """Bounds and capacity of one deployment (`scaler.default`: every deployment without an entry of its own)."""

    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS, description="Fewest replicas kvpilot will ask for.")
    max_replicas: int = Field(
        default=100,
        ge=1,
        le=MAX_REPLICAS,
        description="Most replicas kvpilot will ask for (100: KEDA's default `maxReplicaCount`).",
    )
    capacity_rps: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Requests/s one replica serves at 1,000 prompt and 200 output tokens a request; kvpilot converts it to"
            " the measured token mix (an output token weighs 4 prompt tokens) and the SLO feedback corrects it, as a"
            " learned capacity; unset: from the profile, else learned."
        ),
    )
    profile: ServingProfileSettings | None = Field(
        default=None, description="What one replica does, from a benchmark of it; unset: capacity is learned."
    )

    @model_validator(mode="after")
    def _ordered(self) -> DeploymentScaling:
        """`min_replicas` ≤ `max_replicas`"""
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas ({self.max_replicas})")
        return self


class PoolScaling(_Section):
    """One pool of every disaggregated deployment (docs/disaggregated.md); unset fields take the deployment's
    (`scaler.default`, `scaler.cold_start_s`)."""

    gpu_type: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$",
        description="GPU type of this pool's replicas, a key of `cost.gpus`: prices the pool (after a "
        "`cost.deployments` entry for the deployment or the pool).",
    )
    cold_start_s: float | None = Field(default=None, ge=0, description="Cold start of this pool's replicas, s.")
    min_replicas: int | None = Field(
        default=None, ge=0, le=MAX_REPLICAS, description="Fewest replicas the pool is sized to."
    )
    max_replicas: int | None = Field(
        default=None, ge=1, le=MAX_REPLICAS, description="Most replicas the pool is sized to."
    )
    profile: ServingProfileSettings | None = Field(
        default=None, description="What one replica of this pool does (its GPU type's benchmark)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> PoolScaling:
        """min_replicas does not exceed max_replicas"""
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas ({self.max_replicas})")
        return self


class PlannerSettings(_Section):
    """The planner's choices; unset fields take kvpilot's defaults (`scaler.planner.planner_config`), which
    `kvpilot config show` prints."""

    forecaster: str | None = Field(
        default=None,
        description="Forecaster the planner uses (one of `scaler.forecast.FORECASTERS`); unset: `auto`, every model "
        "weighted by its own error at the horizon.",
    )
    target_utilisation: float | None = Field(default=None, gt=0, le=1, description="Share of capacity to plan for.")
    slo_ttft_s: float | None = Field(default=None, gt=0, description="TTFT SLO the capacity is corrected against, s.")
    slo_feedback: bool | None = Field(
        default=None, description="Correct capacity by queueing seen at the SLO; unset: on."
    )
    sizing: Literal["safe", "lean", "adaptive"] | None = Field(
        default=None,
        description="How much spare the planner keeps; unset: `safe`. `safe` sizes for the forecast's upper bound "
        "at the target utilisation and never lifts capacity above the profile. `lean` keeps one margin instead of "
        "two (the point forecast at the target utilisation, the upper bound at full capacity, never fewer than "
        "carry the point with one replica lost) and lets clean traffic lift capacity up to the full profile: fewer "
        "replica-hours, less SLO on bursty traffic and while a replica fails (measured in docs/scaling.md, "
        '"Policy"). `adaptive` starts '
        "as `safe`, gives up a twentieth of its margin above the point forecast per minute the SLO is met and "
        "restores all of it after any minute it is missed, for an hour (needs `slo_feedback`; without it, `safe`).",
    )
    burst_floor: bool | None = Field(
        default=None,
        description="Never fewer replicas than serve, at full capacity, the highest service need measured during "
        "the last scale-down window plus cold start: the least rate at which none of the arrivals of any run of "
        "ticks (up to half the rate window) waits past the TTFT SLO (without an SLO: the peak arrival rate over "
        "half the rate window); unset: on (false: off). For on/off traffic whose forecast falls between bursts "
        '(docs/scaling.md, "Policy"); disaggregated pools keep it only where it is set true.',
    )

    @field_validator("forecaster")
    @classmethod
    def _known_forecaster(cls, v: str | None) -> str | None:
        """`forecaster` is one of the registered forecasters (`scaler.forecast.FORECASTERS`)."""
        if v is not None:
            from scaler.forecast import FORECASTERS

            if v not in FORECASTERS:
                raise ValueError(f"unknown forecaster {v!r}; known: {', '.join(sorted(FORECASTERS))}")
        return v


class ScalerSettings(_Section):
    """How replica counts are decided and where they go."""

    mode: Literal["advisory", "keda", "direct"] = Field(
        default="advisory",
        description="`advisory` (decide and publish only), `keda` (publish to KEDA's external scaler) or `direct` "
        "(patch deployments/scale).",
    )
    planner: PlannerSettings = Field(default=PlannerSettings(), description="The planner's choices.")
    cold_start_s: float = Field(
        default=120.0,
        ge=0,
        description="Time from a replica's creation until it serves: the forecast looks this far ahead.",
    )
    horizon_s: float | None = Field(
        default=None,
        gt=0,
        description="How far ahead the forecast looks, s; unset: cold start + one tick + half the rate window.",
    )
    warm_start_s: float = Field(
        default=86400.0, ge=0, description="Stored per-minute history fed to the forecasters at start, s."
    )
    default: DeploymentScaling = Field(
        default=DeploymentScaling(), description="Bounds and capacity of every deployment without its own entry."
    )
    deployments: dict[str, DeploymentScaling] = Field(
        default_factory=dict,
        description="Bounds and capacity per deployment, keyed `namespace/name` (fields below).",
    )
    pools: dict[Literal["prefill", "decode"], PoolScaling] = Field(
        default_factory=dict,
        description="Per pool of disaggregated deployments (keys `prefill`, `decode`): GPU type, cold start, "
        "bounds, serving profile.",
    )

    @field_validator("deployments")
    @classmethod
    def _keys_are_namespaced(cls, v: dict[str, DeploymentScaling]) -> dict[str, DeploymentScaling]:
        """every `deployments` key is `namespace/name`"""
        for key in v:
            ns, _, name = key.partition("/")
            if not ns or not name:
                raise ValueError(f"scaler.deployments key {key!r} must be 'namespace/name'")
        return v
