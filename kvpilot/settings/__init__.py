"""kvpilot's configuration: one pydantic-settings class, read once at start from an optional YAML file plus
``KVPILOT_*`` environment variables (nested with ``__``), and validated with errors that name the field.

Precedence, highest first: keyword arguments, nested environment variables (``KVPILOT_COLLECTOR__INTERVAL_S``),
the flat aliases operators expect (``KVPILOT_HTTP_PORT``, ``KVPILOT_DATABASE_URL``, ``KVPILOT_READ_TOKENS``, …),
the YAML file, the defaults.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
from contextvars import ContextVar
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings import SettingsError as PydanticSettingsError

from collector.scrape import DEFAULT_MAX_BYTES
from detectors.thresholds import Thresholds
from scaler.cost import DEFAULT_GPU_PRICES, DEFAULT_RECOMMEND_MARGIN
from store.fields import TargetSpec

ENV_PREFIX = "KVPILOT_"

# Flat variables that map onto a nested field: the names the issue, the Helm chart and the docs promise.
FLAT_ALIASES: dict[str, tuple[str, ...]] = {
    "KVPILOT_HTTP_PORT": ("api", "http_port"),
    "KVPILOT_GRPC_PORT": ("api", "grpc_port"),
    "KVPILOT_READ_TOKENS": ("api", "read_tokens"),
    "KVPILOT_ADMIN_TOKENS": ("api", "admin_tokens"),
    "KVPILOT_DATABASE_URL": ("store", "database_url"),
}

# Tokens nobody should run a production control plane with: the values people paste from examples.
INSECURE_TOKENS = frozenset({"changeme", "change-me", "changethis", "secret", "token", "admin", "kvpilot", "password"})
MIN_TOKEN_LENGTH = 16
# Estimated from the token's own character frequencies (Shannon), so "aaaa…" or "abab…" of any length fail while
# `openssl rand -hex 24` (about 180 bits by this estimate) passes easily.
MIN_TOKEN_ENTROPY_BITS = 48


def token_entropy_bits(token: str) -> float:
    """Length times the per-character Shannon entropy of ``token``: a cheap lower bar, not a strength proof."""
    if not token:
        return 0.0
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return n * sum(c / n * math.log2(n / c) for c in counts.values())


class SettingsError(ValueError):
    """The configuration is invalid; the message lists every offending field and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StaticTarget(TargetSpec):
    """The same checks as ``POST /v1/targets`` (``store.fields.TargetSpec``): one model for API and config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefix: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_:]*$",
        description="Text before the engine's metric names (Ray Serve LLM: `ray_`); unset: found on the page; "
        '`""`: none, and no search.',
    )


class DiscoverySettings(_Section):
    """Where the targets come from. ``simulator`` runs the built-in fake fleet in-process (the zero-config demo)."""

    kind: Literal["simulator", "static", "kubernetes", "promql"] = Field(
        default="simulator",
        description="`static` (listed targets), `kubernetes` (labelled pods), `promql` (targets from a "
        "Prometheus-compatible API) or `simulator` (the built-in fleet).",
    )
    static_file: Path | None = Field(
        default=None, description="YAML list of static targets (fields as below), re-read when it changes."
    )
    static_targets: tuple[StaticTarget, ...] = Field(
        default=(), description="Targets listed inline (also added to any discovered ones)."
    )
    kubernetes_namespace: str | None = Field(
        default=None, description="Namespace to discover pods in; unset: all namespaces."
    )
    kubernetes_label_selector: str = Field(
        default="kvpilot.io/scrape=true", description="Pods carrying these labels are scraped."
    )
    promql_url: str | None = Field(
        default=None, description="Base URL of Prometheus, Thanos or Mimir for `kind: promql`."
    )
    promql_mode: Literal["replicas", "aggregates"] = Field(
        default="replicas",
        description="`replicas`: every raw series of every replica, each tick (exact, cost grows with the fleet); "
        "`aggregates`: per-deployment signals computed by Prometheus (kvpilot's recording rules, else ad hoc) plus "
        "only the replicas and GPUs a detector must see (docs/scaling-large-fleets.md).",
    )
    promql_selector: str = Field(
        default="", description='Label matchers added to every PromQL query, e.g. `namespace="prod"`.'
    )
    promql_max_answer_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1024, description="Largest PromQL answer read; a larger one fails the tick."
    )
    promql_max_replicas: int = Field(
        default=500, ge=1, description="`aggregates` mode: most replicas read series by series."
    )
    simulator_replicas: int = Field(
        default=4, ge=1, le=1000, description="Replicas of the built-in simulator (`kind: simulator`)."
    )
    simulator_trace: Path | None = Field(
        default=None,
        description="Trace the simulator replays (a file, or `synthetic[:k=v]`); unset: the simulator's built-in "
        "default.",
    )

    @model_validator(mode="after")
    def _source_configured(self) -> DiscoverySettings:
        """`kind: promql` needs `promql_url`"""
        if self.kind == "promql" and not self.promql_url:
            raise ValueError("discovery.kind is 'promql' but discovery.promql_url is not set")
        return self


class CollectorSettings(_Section):
    """How often and how the targets are scraped."""

    interval_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="Control-loop tick: every target is scraped, and findings and decisions are computed, once per "
        "interval.",
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Per-scrape timeout; a target slower than this counts as a failed scrape.",
    )
    concurrency: int = Field(default=64, ge=1, le=10_000, description="Most scrapes in flight at once.")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1024,
        description="Largest metrics page read from a target: the one page cap (`scrape`, `parse` too).",
    )
    rate_window_s: float = Field(
        default=60.0,
        gt=0,
        description="Window over which counters become rates (arrivals, tokens, prefix-cache hit ratio).",
    )
    history_s: float = Field(
        default=3600.0,
        gt=0,
        description="History kept in memory per replica (and restored from the store's roll-ups at start).",
    )
    stale_after_s: float = Field(
        default=30.0,
        gt=0,
        description="A replica not scraped successfully for this long no longer counts as ready.",
    )
    discovery: DiscoverySettings = Field(default=DiscoverySettings(), description="Target discovery.")

    @model_validator(mode="after")
    def _timeout_fits_tick(self) -> CollectorSettings:
        """`timeout_s` < `interval_s`"""
        if self.timeout_s >= self.interval_s:
            raise ValueError(
                f"collector.timeout_s ({self.timeout_s}) must be shorter than collector.interval_s ({self.interval_s})"
            )
        return self


Scalar = float | int | str | bool


class DetectorSettings(_Section):
    """Overrides of the detectors' own thresholds (``detectors.thresholds``), by section and field, so detectors,
    alert rules and this file share one set of defaults; ``only`` restricts which detectors run."""

    only: tuple[str, ...] | None = Field(default=None, description="Run only these detectors (by kind); unset: all.")
    kv: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the KV-exhaustion thresholds (table below)."
    )
    prefix: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the prefix-cache-miss thresholds (table below)."
    )
    gpu: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the stuck-GPU thresholds (table below)."
    )
    ttft: dict[str, Scalar] = Field(default_factory=dict, description="Overrides of the TTFT SLO (table below).")
    target: dict[str, Scalar] = Field(
        default_factory=dict, description="Overrides of the target-down threshold (table below)."
    )

    @model_validator(mode="after")
    def _applies(self) -> DetectorSettings:
        """every override names a known threshold and passes its range check"""
        self.thresholds(tick_s=5.0)  # unknown fields and out-of-range values fail at start, named
        return self

    def thresholds(self, *, tick_s: float) -> Thresholds:
        base = Thresholds(tick_s=tick_s)
        changes: dict[str, object] = {}
        for section in ("kv", "prefix", "gpu", "ttft", "target"):
            overrides = getattr(self, section)
            if not overrides:
                continue
            current = getattr(base, section)
            known = {f.name for f in dataclasses.fields(current)}
            unknown = sorted(set(overrides) - known)
            if unknown:
                raise ValueError(f"detectors.{section}: unknown field(s) {unknown}; known: {sorted(known)}")
            try:
                changes[section] = dataclasses.replace(current, **overrides)
            except (TypeError, ValueError) as e:
                raise ValueError(f"detectors.{section}: {e}") from None
        return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


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


class DeploymentScaling(_Section):
    """Bounds and capacity of one deployment (`scaler.default`: every deployment without an entry of its own)."""

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas kvpilot will ask for.")
    max_replicas: int = Field(
        default=100, ge=1, description="Most replicas kvpilot will ask for (100: KEDA's default `maxReplicaCount`)."
    )
    capacity_rps: float | None = Field(
        default=None,
        gt=0,
        description="Requests/s one replica serves, a fixed number; unset: from the profile, else learned.",
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
    min_replicas: int | None = Field(default=None, ge=0, description="Fewest replicas the pool is sized to.")
    max_replicas: int | None = Field(default=None, ge=1, description="Most replicas the pool is sized to.")
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
        description="Never fewer replicas than serve, at full capacity, the highest arrival rate measured over half "
        "the rate window during the last scale-down window plus cold start (less the wait the TTFT SLO allows); "
        'unset: off. For on/off traffic whose forecast falls between bursts (docs/scaling.md, "Policy").',
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


class StoreSettings(_Section):
    """Where findings, decisions and roll-ups are kept."""

    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the store; unset: a SQLite file under `data_dir`."
    )
    retention_days: float = Field(
        default=30.0, gt=0, description="Findings, decisions and roll-ups older than this are deleted."
    )
    buffer_max_writes: int = Field(default=10_000, ge=1, description="Writes held while the store is unreachable.")
    auto_migrate: bool = Field(
        default=True,
        description="`kvpilot run` upgrades the schema to head at start (else: `kvpilot db upgrade`).",
    )


TokenList = Annotated[tuple[SecretStr, ...], NoDecode]


def _split_tokens(v: Any) -> Any:
    """tokens given as one comma-separated string are split"""
    if isinstance(v, str):
        return tuple(t.strip() for t in v.split(",") if t.strip())
    return v


class ApiSettings(_Section):
    """The HTTP API, its /metrics, and the KEDA gRPC port."""

    host: str = Field(default="0.0.0.0", description="Address the HTTP and gRPC servers bind.")
    http_port: int = Field(default=8080, ge=0, le=65535, description="HTTP API and /metrics port (0: any free port).")
    grpc_port: int = Field(
        default=9090, ge=0, le=65535, description="KEDA external-scaler gRPC port (0: any free port)."
    )
    read_tokens: TokenList = Field(
        default=(), description="Bearer tokens allowed to read; comma-separated in the environment."
    )
    admin_tokens: TokenList = Field(
        default=(),
        description="Bearer tokens allowed to read and to act (approve drains); comma-separated in the environment.",
    )
    anonymous_read: bool = Field(
        default=False, description="Outside development, reads need a token unless this is set."
    )
    max_body_bytes: int = Field(default=64 * 1024, ge=256, description="Largest request body the API accepts.")

    _split_read = field_validator("read_tokens", "admin_tokens", mode="before")(_split_tokens)


class KedaSettings(_Section):
    """The KEDA external scaler (gRPC) and the metrics-api route: when a decision counts as stale, and how the gRPC
    server is secured. TLS: a certificate and key; with a client CA as well, KEDA must present a certificate it
    signed (mTLS, KEDA's `tlsClientCert`/`tlsClientKey`). Bearer tokens: every ExternalScaler call must carry one,
    as the `bearerTokenFromEnv` trigger metadata KEDA resolves from the scale target's environment, or as a gRPC
    `authorization: Bearer …` header (grpcurl, other clients). The health service stays open (kubelet probes)."""

    stale_after_ticks: float = Field(
        default=6.0, ge=2, description="A decision older than this many loop intervals is refused."
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate of the gRPC server (set: TLS); it names the `scalerAddress` host.",
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of that certificate.")
    tls_client_ca_file: Path | None = Field(
        default=None, description="Set: mutual TLS, client certificates signed by this CA are required."
    )
    bearer_tokens: TokenList = Field(
        default=(),
        description="Set: every ExternalScaler call must carry one of these; comma-separated in the environment.",
    )

    _split_bearer = field_validator("bearer_tokens", mode="before")(_split_tokens)

    @model_validator(mode="after")
    def _tls_complete(self) -> KedaSettings:
        """`tls_cert_file` and `tls_key_file` come together, and `tls_client_ca_file` (mTLS) needs them."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("keda.tls_cert_file and keda.tls_key_file must be set together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("keda.tls_client_ca_file (mutual TLS) needs keda.tls_cert_file and keda.tls_key_file")
        for i, token in enumerate(self.bearer_tokens):
            if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"keda.bearer_tokens[{i}]: shorter than {MIN_TOKEN_LENGTH} characters; "
                    "generate one with `openssl rand -hex 24`"
                )
        return self


class GpuPriceSettings(_Section):
    """One GPU type's price and power, per GPU (defaults and their sources: `scaler.cost.DEFAULT_GPU_PRICES`)."""

    price_per_hour_usd: float = Field(gt=0, description="Dollars per GPU-hour.")
    power_w: float = Field(gt=0, description="Maximum board power of one GPU (datasheet), W.")


class GpuAssignmentSettings(_Section):
    """What a deployment's replicas run on; unset: read from the GPU exporter (dcgm `modelName`, NVML name) of the
    replicas' GPUs, and a replica's GPU count from how many of them serve it."""

    gpu_type: str | None = Field(default=None, description="GPU type, a key of `cost.gpus`.")
    gpus_per_replica: int | None = Field(
        default=None, ge=1, le=64, description="GPUs one replica holds (tensor parallel)."
    )


def _default_gpus() -> dict[str, GpuPriceSettings]:
    """The built-in price and power of each GPU type (`scaler.cost.DEFAULT_GPU_PRICES`; sources in docs/cost.md)."""
    return {k: GpuPriceSettings(price_per_hour_usd=v.price_per_hour_usd, power_w=v.power_w)
            for k, v in DEFAULT_GPU_PRICES.items()}  # fmt: skip


class CostSettings(_Section):
    """What the fleet costs (docs/cost.md). `gpus` entries are merged onto the defaults field by field, so
    `gpus: {H100: {price_per_hour_usd: 2.1}}` changes the H100's price only and keeps every other type."""

    gpus: dict[str, GpuPriceSettings] = Field(
        default_factory=_default_gpus,
        description="Price and power per GPU, by GPU type (the defaults: docs/cost.md); entries given are merged onto "
        "the defaults field by field.",
    )
    default: GpuAssignmentSettings = Field(
        default=GpuAssignmentSettings(), description="What every deployment without its own entry runs on."
    )
    deployments: dict[str, GpuAssignmentSettings] = Field(
        default_factory=dict,
        description='What a deployment runs on, keyed "namespace/name", or "namespace/name@prefill" for one pool '
        "(then the deployment's entry, then `default`).",
    )
    recommend: bool = Field(
        default=True, description="Advise a cheaper GPU type that meets the SLO, from the simulator's profiles."
    )
    recommend_margin: float = Field(
        default=DEFAULT_RECOMMEND_MARGIN,
        ge=0,
        lt=1,
        description="A cheaper type is advised only when it saves at least this share (the profiles' own error is "
        "5-30 %).",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _onto_defaults(cls, v: Any) -> Any:
        """`gpus` entries are merged onto the default types field by field; names are letters, digits, `_.-`."""
        if not isinstance(v, dict):
            return v
        merged: dict[str, Any] = {k: g.model_dump() for k, g in _default_gpus().items()}
        for name, entry in v.items():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}", name):
                raise ValueError(f"cost.gpus: {name!r} is not a GPU type name (letters, digits, '_.-')")
            entry = entry.model_dump() if isinstance(entry, BaseModel) else entry
            merged[name] = {**merged.get(name, {}), **entry} if isinstance(entry, dict) else entry
        return merged

    @model_validator(mode="after")
    def _types_priced(self) -> CostSettings:
        """`deployments` keys are `namespace/name`; every `gpu_type` named has a price in `gpus`."""
        for key in self.deployments:
            ns, _, name = key.partition("/")
            if not ns or not name:
                raise ValueError(f"cost.deployments key {key!r} must be 'namespace/name'")
        for where, a in (("cost.default", self.default),
                         *((f"cost.deployments[{k!r}]", a) for k, a in self.deployments.items())):  # fmt: skip
            if a.gpu_type is not None and a.gpu_type not in self.gpus:
                raise ValueError(
                    f"{where}.gpu_type {a.gpu_type!r} has no price in cost.gpus (known: {', '.join(sorted(self.gpus))})"
                )
        return self


class DrainSettings(_Section):
    """Draining nodes whose GPUs are stuck."""

    dry_run: bool = Field(default=True, description="Record drain actions without cordoning or evicting anything.")
    max_concurrent: int = Field(default=1, ge=0, description="Most nodes drained (approved or executing) at once.")
    breaker_share: float = Field(
        default=0.2, gt=0, le=1, description="Refuse to drain when more than this share of nodes is flagged."
    )
    require_approval: bool = Field(
        default=True, description="A drain waits for an admin's approval through the API before it runs."
    )


class HaSettings(_Section):
    """Several replicas of kvpilot, one of them (the holder of a Kubernetes Lease) actuating."""

    enabled: bool = Field(default=False, description="Run several replicas; only the holder of the Lease actuates.")
    lease_name: str = Field(default="kvpilot-leader", description="Name of the coordination.k8s.io Lease.")
    lease_namespace: str = Field(default="default", description="Namespace of the Lease.")
    lease_duration_s: float = Field(
        default=15.0, gt=0, description="A leader that has not renewed for this long loses the Lease."
    )
    renew_every_s: float = Field(
        default=5.0, gt=0, description="How often the leader renews (and followers try to take) the Lease."
    )
    identity: str = Field(
        default_factory=socket.gethostname,
        description="This replica's name in the Lease (the pod name in Kubernetes); unset: the host name.",
    )

    @model_validator(mode="after")
    def _renew_within_lease(self) -> HaSettings:
        """`renew_every_s` < `lease_duration_s`"""
        if self.renew_every_s >= self.lease_duration_s:
            raise ValueError(
                f"ha.renew_every_s ({self.renew_every_s}) must be shorter than ha.lease_duration_s "
                f"({self.lease_duration_s})"
            )
        return self


class ShardingSettings(_Section):
    """Several kvpilot instances splitting the fleet by deployment (kvpilot.runtime.shards): each holds the Leases of
    some shards (named after `ha.lease_name`, in `ha.lease_namespace`, held for `ha.lease_duration_s`, renewed every
    `ha.renew_every_s` by `ha.identity`), scrapes, decides and actuates only their deployments, and forwards KEDA's
    calls for the others to their owner. Needs a Kubernetes API, like `ha`."""

    shards: int = Field(
        default=1, ge=1, le=1024, description="1: off; N: deployments split by a stable hash into N shards."
    )
    advertise_address: str | None = Field(
        default=None,
        description="host:port where the other instances reach this one's KEDA gRPC server; unset: `$POD_IP`, else "
        "the host name, with `api.grpc_port`.",
    )
    forward_timeout_s: float = Field(
        default=2.0, gt=0, description="A KEDA call forwarded to a shard's owner waits this long, s."
    )

    @property
    def enabled(self) -> bool:
        return self.shards > 1


def _default_data_dir() -> Path:
    """`$XDG_DATA_HOME/kvpilot`, else `~/.local/share/kvpilot`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvpilot"


class _FlatAliasSource(PydanticBaseSettingsSource):
    """Maps the flat ``KVPILOT_HTTP_PORT``-style variables onto their nested fields."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for env, path in FLAT_ALIASES.items():
            if env in os.environ:
                node = out
                for part in path[:-1]:
                    node = node.setdefault(part, {})
                node[path[-1]] = os.environ[env]
        return out


class _YamlFileSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, with errors that name the file: one that is missing, unreadable, not YAML or
    not a mapping at the top fails the start (the library skips a missing file and trips over a list). Its keys are
    taken as written, so a misspelt or miscased one is refused like any unknown key (the library would match the top
    level case-insensitively, as it does environment variables). Relative file paths in it are read from its
    folder."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        if path is not None:
            try:
                path.open("rb").close()
            except OSError as e:
                raise SettingsError(f"cannot read config file {path}: {e.strerror}") from e
        super().__init__(settings_cls, yaml_file=path)
        self.init_kwargs = dict(self.yaml_data)

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except OSError as e:
            raise SettingsError(f"cannot read config file {file_path}: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise SettingsError(f"config file {file_path} is not valid YAML: {e}") from e
        if not isinstance(data, dict):
            raise SettingsError(f"config file {file_path} must hold a mapping at the top, not {type(data).__name__}")
        data = {str(key): value for key, value in data.items()}  # `1:` or `true:` is an unknown key like any other
        if isinstance(file_path, Path):
            _paths_from_folder(data, file_path.parent)
        return data


# File paths the YAML file names are read from the file's folder, as kubectl and Prometheus read theirs, so
# `kvpilot run -c deploy/kvpilot.yaml` finds `static_file: targets.yaml` beside it from any working directory. The
# same settings from KVPILOT_* variables or the command line stay relative to the working directory.
_FILE_RELATIVE = (
    ("data_dir",),
    ("collector", "discovery", "static_file"),
    ("collector", "discovery", "simulator_trace"),
    ("keda", "tls_cert_file"),
    ("keda", "tls_key_file"),
    ("keda", "tls_client_ca_file"),
)


def _paths_from_folder(data: dict[str, Any], folder: Path) -> None:
    for path in _FILE_RELATIVE:
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(path[-1]) if isinstance(node, dict) else None
        # `synthetic[:k=v]` is the simulator's built-in trace, not a file
        if not isinstance(value, str) or not value or value.startswith("synthetic"):
            continue
        p = Path(value).expanduser()
        if not p.is_absolute():
            node[path[-1]] = str(folder / p)


class Settings(BaseSettings):
    """Everything `kvpilot run` reads at start."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        nested_model_default_partial_update=True,
    )

    environment: Literal["development", "production"] = Field(
        default="development",
        description="`production` refuses to start without admin tokens and with well-known or short tokens.",
    )
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Folder for the default SQLite store (`kvpilot.db`); unset: `$XDG_DATA_HOME/kvpilot`, else "
        "`~/.local/share/kvpilot`.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Log level of every kvpilot logger."
    )
    collector: CollectorSettings = Field(default=CollectorSettings(), description="Scraping and discovery.")
    detectors: DetectorSettings = Field(default=DetectorSettings(), description="The detectors and their thresholds.")
    scaler: ScalerSettings = Field(default=ScalerSettings(), description="Scaling decisions.")
    store: StoreSettings = Field(default=StoreSettings(), description="The database.")
    api: ApiSettings = Field(default=ApiSettings(), description="The HTTP and gRPC servers and their tokens.")
    drains: DrainSettings = Field(default=DrainSettings(), description="Node drains.")
    ha: HaSettings = Field(default=HaSettings(), description="High availability by leader election.")
    sharding: ShardingSettings = Field(default=ShardingSettings(), description="Splitting the fleet between instances.")
    keda: KedaSettings = Field(default=KedaSettings(), description="The KEDA external scaler.")
    cost: CostSettings = Field(default=CostSettings(), description="GPU prices and assignments.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            _FlatAliasSource(settings_cls),
            _YamlFileSource(settings_cls, _config_file.get()),
        )

    @model_validator(mode="after")
    def _pool_gpus_priced(self) -> Settings:
        """every `scaler.pools` GPU type has a price in `cost.gpus`"""
        for pool, p in self.scaler.pools.items():
            if p.gpu_type is not None and p.gpu_type not in self.cost.gpus:
                raise ValueError(
                    f"scaler.pools.{pool}.gpu_type {p.gpu_type!r} has no price in cost.gpus "
                    f"(known: {', '.join(sorted(self.cost.gpus))})"
                )
        return self

    @model_validator(mode="after")
    def _secrets_not_at_defaults(self) -> Settings:
        """outside development, admin tokens are set and none is weak"""
        if self.environment == "development":
            return self
        if not self.api.admin_tokens:
            raise ValueError("api.admin_tokens: outside development at least one admin token is required")
        for scope in ("read_tokens", "admin_tokens"):
            for i, token in enumerate(getattr(self.api, scope)):
                value = token.get_secret_value()
                if value.lower() in INSECURE_TOKENS or len(value) < MIN_TOKEN_LENGTH:
                    raise ValueError(
                        f"api.{scope}[{i}]: token is a well-known default or shorter than {MIN_TOKEN_LENGTH} "
                        "characters; generate one with `openssl rand -hex 24`"
                    )
                if token_entropy_bits(value) < MIN_TOKEN_ENTROPY_BITS:
                    raise ValueError(
                        f"api.{scope}[{i}]: token is too predictable (about {token_entropy_bits(value):.0f} bits, "
                        f"at least {MIN_TOKEN_ENTROPY_BITS} needed); generate one with `openssl rand -hex 24`"
                    )
        return self

    @model_validator(mode="after")
    def _read_is_not_admin(self) -> Settings:
        """no token is both a read and an admin token"""
        read = {t.get_secret_value() for t in self.api.read_tokens}
        for i, token in enumerate(self.api.admin_tokens):
            if token.get_secret_value() in read:
                raise ValueError(
                    f"api.admin_tokens[{i}] is also a read token: the read scope would grant admin; "
                    "use different tokens"
                )
        return self

    @property
    def database_url(self) -> str:
        """The store's URL: the configured one, else a SQLite file under ``data_dir``."""
        if self.store.database_url:
            return self.store.database_url
        return f"sqlite:///{self.data_dir / 'kvpilot.db'}"

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api.read_tokens or self.api.admin_tokens)

    @property
    def decision_stale_after_s(self) -> float:
        """When a published decision stops being served (gRPC UNAVAILABLE, metrics-api 503) so KEDA's fallback
        applies: the loop has missed several ticks. Judged on the loop's liveness, never on ready replicas."""
        return self.keda.stale_after_ticks * self.collector.interval_s

    @property
    def horizon_s(self) -> float:
        return self.scaler.horizon_s or (
            self.scaler.cold_start_s + self.collector.interval_s + self.collector.rate_window_s / 2.0
        )


# The file of the `load_settings` call in progress. pydantic-settings builds its sources from the class, not from the
# call (pydantic-settings#259); a context variable hands the file over without leaking into other threads or tasks.
_config_file: ContextVar[Path | None] = ContextVar("kvpilot_config_file", default=None)


def _format_errors(err: ValidationError, path: Path | None) -> str:
    where = f" (config file {path} and KVPILOT_* environment)" if path else " (KVPILOT_* environment)"
    lines = [f"invalid configuration{where}:"]
    line_of = _yaml_lines(path)
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        line = line_of(e["loc"])
        at = f" ({path.name}:{line})" if path is not None and line is not None else ""
        lines.append(f"  {loc}{at}: {msg}" if loc else f"  {msg}")
    return "\n".join(lines)


def _yaml_lines(path: Path | None) -> Any:
    """loc -> the line in the YAML file of the value at ``loc`` (None when the file does not hold it)."""
    root: Any = None
    if path is not None:
        try:
            root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
        except (OSError, yaml.YAMLError):
            root = None

    def line_of(loc: tuple[int | str, ...]) -> int | None:
        node, line = root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                found = next(((k, v) for k, v in node.value if k.value == str(part)), None)
                if found is None:
                    return None
                line, node = found[0].start_mark.line + 1, found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return None  # not (all) in the file: the environment or a default set it
        return line

    return line_of


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Read, validate and return the settings; raise ``SettingsError`` naming every bad field."""
    path = Path(config_file) if config_file is not None else None
    token = _config_file.set(path)
    try:
        return Settings(**overrides)
    except ValidationError as e:
        raise SettingsError(_format_errors(e, path)) from None
    except PydanticSettingsError as e:  # a KVPILOT_* value that is not the JSON its nested field needs
        cause = f": {e.__cause__}" if e.__cause__ else ""
        raise SettingsError(f"invalid configuration (KVPILOT_* environment): {e}{cause}") from None
    finally:
        _config_file.reset(token)
