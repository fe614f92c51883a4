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

    # Text before the engine's metric names (Ray Serve LLM: `ray_`); unset: found on the page; "": none, no search.
    prefix: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_:]*$")


class DiscoverySettings(_Section):
    """Where the targets come from. ``simulator`` runs the built-in fake fleet in-process (the zero-config demo)."""

    kind: Literal["simulator", "static", "kubernetes", "promql"] = "simulator"
    static_file: Path | None = None  # YAML list of StaticTarget, re-read when it changes
    static_targets: tuple[StaticTarget, ...] = ()
    kubernetes_namespace: str | None = None  # None: all namespaces
    kubernetes_label_selector: str = "kvpilot.io/scrape=true"
    promql_url: str | None = None
    # `replicas`: every raw series of every replica, each tick (exact, cost grows with the fleet); `aggregates`:
    # per-deployment signals computed by Prometheus (kvpilot's recording rules, else ad hoc) plus only the replicas
    # and GPUs a detector must see (docs/scaling-large-fleets.md).
    promql_mode: Literal["replicas", "aggregates"] = "replicas"
    promql_selector: str = ""  # label matchers added to every PromQL query, e.g. `namespace="prod"`
    promql_max_answer_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)  # a larger answer fails the tick
    promql_max_replicas: int = Field(default=500, ge=1)  # aggregates mode: most replicas read series by series
    simulator_replicas: int = Field(default=4, ge=1, le=1000)
    simulator_trace: Path | None = None  # None: the simulator's built-in default

    @model_validator(mode="after")
    def _source_configured(self) -> DiscoverySettings:
        if self.kind == "promql" and not self.promql_url:
            raise ValueError("discovery.kind is 'promql' but discovery.promql_url is not set")
        return self


class CollectorSettings(_Section):
    interval_s: float = Field(default=5.0, gt=0, le=3600)
    timeout_s: float = Field(default=2.0, gt=0, le=60)
    concurrency: int = Field(default=64, ge=1, le=10_000)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1024)  # the one page cap (`scrape`, `parse` too)
    rate_window_s: float = Field(default=60.0, gt=0)
    history_s: float = Field(default=3600.0, gt=0)
    stale_after_s: float = Field(default=30.0, gt=0)
    discovery: DiscoverySettings = DiscoverySettings()

    @model_validator(mode="after")
    def _timeout_fits_tick(self) -> CollectorSettings:
        if self.timeout_s >= self.interval_s:
            raise ValueError(
                f"collector.timeout_s ({self.timeout_s}) must be shorter than collector.interval_s ({self.interval_s})"
            )
        return self


Scalar = float | int | str | bool


class DetectorSettings(_Section):
    """Overrides of the detectors' own thresholds (``detectors.thresholds``), by section and field, so detectors,
    alert rules and this file share one set of defaults; ``only`` restricts which detectors run."""

    only: tuple[str, ...] | None = None
    kv: dict[str, Scalar] = Field(default_factory=dict)
    prefix: dict[str, Scalar] = Field(default_factory=dict)
    gpu: dict[str, Scalar] = Field(default_factory=dict)
    ttft: dict[str, Scalar] = Field(default_factory=dict)
    target: dict[str, Scalar] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _applies(self) -> DetectorSettings:
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

    prefill_tokens_per_s: float = Field(gt=0)  # uncached prompt tokens/s at full compute
    decode_step_s: float = Field(gt=0)  # inter-token latency with one sequence
    decode_tokens_per_s: float = Field(gt=0)  # output tokens/s with a full batch of short sequences
    kv_tokens: float = Field(gt=0)  # the KV pool in tokens (vllm:cache_config_info, or the engine's start-up log)
    max_num_seqs: int = Field(default=256, ge=1)  # sequences one replica batches at most (vLLM --max-num-seqs)
    kv_read_tokens_per_s: float | None = Field(default=None, gt=0)  # HBM bandwidth / KV bytes per token


class DeploymentScaling(_Section):
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=100, ge=1)
    capacity_rps: float | None = Field(default=None, gt=0)  # a fixed number; None: the profile, else learned
    profile: ServingProfileSettings | None = None

    @model_validator(mode="after")
    def _ordered(self) -> DeploymentScaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas ({self.max_replicas})")
        return self


class PoolScaling(_Section):
    """One pool of every disaggregated deployment (docs/disaggregated.md); unset fields take the deployment's
    (`scaler.default`, `scaler.cold_start_s`)."""

    gpu_type: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$",
        description="GPU type of this pool's replicas, a key of cost.gpus: prices the pool (after a "
        "cost.deployments entry for the deployment or the pool)",
    )
    cold_start_s: float | None = Field(default=None, ge=0, description="cold start of this pool's replicas, s")
    min_replicas: int | None = Field(default=None, ge=0, description="fewest replicas the pool is sized to")
    max_replicas: int | None = Field(default=None, ge=1, description="most replicas the pool is sized to")
    profile: ServingProfileSettings | None = Field(
        default=None, description="what one replica of this pool does (its GPU type's benchmark)"
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

    forecaster: str | None = None  # default "auto": every model, weighted by its own error at the horizon
    target_utilisation: float | None = Field(default=None, gt=0, le=1)  # share of capacity to plan for
    slo_ttft_s: float | None = Field(default=None, gt=0)  # TTFT SLO the capacity is corrected against
    slo_feedback: bool | None = None  # correct capacity by queueing seen at the SLO (default on)

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
    mode: Literal["advisory", "keda", "direct"] = "advisory"
    planner: PlannerSettings = PlannerSettings()
    cold_start_s: float = Field(default=120.0, ge=0)
    horizon_s: float | None = Field(default=None, gt=0)  # None: cold start + one tick + half the rate window
    warm_start_s: float = Field(default=86400.0, ge=0)  # stored per-minute history fed to forecasters at start
    default: DeploymentScaling = DeploymentScaling()
    deployments: dict[str, DeploymentScaling] = Field(default_factory=dict)  # key "namespace/name"
    pools: dict[Literal["prefill", "decode"], PoolScaling] = Field(
        default_factory=dict,
        description="per pool of disaggregated deployments (keys prefill, decode): GPU type, cold start, bounds, "
        "serving profile",
    )

    @field_validator("deployments")
    @classmethod
    def _keys_are_namespaced(cls, v: dict[str, DeploymentScaling]) -> dict[str, DeploymentScaling]:
        for key in v:
            ns, _, name = key.partition("/")
            if not ns or not name:
                raise ValueError(f"scaler.deployments key {key!r} must be 'namespace/name'")
        return v


class StoreSettings(_Section):
    database_url: str | None = None  # None: SQLite file under data_dir
    retention_days: float = Field(default=30.0, gt=0)
    buffer_max_writes: int = Field(default=10_000, ge=1)  # writes held while the store is unreachable
    auto_migrate: bool = True  # `kvpilot run` upgrades the schema to head at start (else: `kvpilot db upgrade`)


TokenList = Annotated[tuple[SecretStr, ...], NoDecode]


def _split_tokens(v: Any) -> Any:
    if isinstance(v, str):
        return tuple(t.strip() for t in v.split(",") if t.strip())
    return v


class ApiSettings(_Section):
    host: str = "0.0.0.0"
    http_port: int = Field(default=8080, ge=0, le=65535)
    grpc_port: int = Field(default=9090, ge=0, le=65535)
    read_tokens: TokenList = ()
    admin_tokens: TokenList = ()
    anonymous_read: bool = False  # outside development: reads need a token unless this is set
    max_body_bytes: int = Field(default=64 * 1024, ge=256)

    _split_read = field_validator("read_tokens", "admin_tokens", mode="before")(_split_tokens)


class KedaSettings(_Section):
    """The KEDA external scaler (gRPC) and the metrics-api route: when a decision counts as stale, and how the gRPC
    server is secured. TLS: a certificate and key; with a client CA as well, KEDA must present a certificate it
    signed (mTLS, KEDA's `tlsClientCert`/`tlsClientKey`). Bearer tokens: every ExternalScaler call must carry one,
    as the `bearerTokenFromEnv` trigger metadata KEDA resolves from the scale target's environment, or as a gRPC
    `authorization: Bearer …` header (grpcurl, other clients). The health service stays open (kubelet probes)."""

    stale_after_ticks: float = Field(default=6.0, ge=2)  # a decision older than this many loop intervals is refused
    tls_cert_file: Path | None = None  # PEM certificate of the gRPC server (set: TLS); names the scalerAddress host
    tls_key_file: Path | None = None  # PEM private key of that certificate
    tls_client_ca_file: Path | None = None  # set: mutual TLS, client certificates signed by this CA are required
    bearer_tokens: TokenList = ()  # set: every ExternalScaler call must carry one; comma-separated in the environment

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

    price_per_hour_usd: float = Field(gt=0)  # dollars per GPU-hour
    power_w: float = Field(gt=0)  # maximum board power of one GPU (datasheet)


class GpuAssignmentSettings(_Section):
    """What a deployment's replicas run on; unset: read from the GPU exporter (dcgm `modelName`, NVML name) of the
    replicas' GPUs, and a replica's GPU count from how many of them serve it."""

    gpu_type: str | None = None  # a key of cost.gpus
    gpus_per_replica: int | None = Field(default=None, ge=1, le=64)  # GPUs one replica holds (tensor parallel)


def _default_gpus() -> dict[str, GpuPriceSettings]:
    return {k: GpuPriceSettings(price_per_hour_usd=v.price_per_hour_usd, power_w=v.power_w)
            for k, v in DEFAULT_GPU_PRICES.items()}  # fmt: skip


class CostSettings(_Section):
    """What the fleet costs (docs/cost.md). `gpus` entries are merged onto the defaults field by field, so
    `gpus: {H100: {price_per_hour_usd: 2.1}}` changes the H100's price only and keeps every other type."""

    # per GPU: H100 $2.69/h 700 W, H200 $3.59/h 700 W, A100 $1.39/h 400 W, L4 $0.44/h 72 W (docs/cost.md)
    gpus: dict[str, GpuPriceSettings] = Field(default_factory=_default_gpus)
    default: GpuAssignmentSettings = GpuAssignmentSettings()
    # key "namespace/name", or "namespace/name@prefill" for one pool (then the deployment's entry, then `default`)
    deployments: dict[str, GpuAssignmentSettings] = Field(default_factory=dict)
    recommend: bool = True  # advise a cheaper GPU type that meets the SLO, from the simulator's profiles
    # a cheaper type is advised only when it saves at least this share (the profiles' own error is 5-30 %)
    recommend_margin: float = Field(default=DEFAULT_RECOMMEND_MARGIN, ge=0, lt=1)

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
    dry_run: bool = True
    max_concurrent: int = Field(default=1, ge=0)
    breaker_share: float = Field(default=0.2, gt=0, le=1)  # refuse when more than this share of nodes is flagged
    require_approval: bool = True


class HaSettings(_Section):
    enabled: bool = False
    lease_name: str = "kvpilot-leader"
    lease_namespace: str = "default"
    lease_duration_s: float = Field(default=15.0, gt=0)
    renew_every_s: float = Field(default=5.0, gt=0)
    identity: str = Field(default_factory=socket.gethostname)

    @model_validator(mode="after")
    def _renew_within_lease(self) -> HaSettings:
        if self.renew_every_s >= self.lease_duration_s:
            raise ValueError(
                f"ha.renew_every_s ({self.renew_every_s}) must be shorter than ha.lease_duration_s "
                f"({self.lease_duration_s})"
            )
        return self


class ShardingSettings(_Section):
    """Several kvpilot instances splitting the fleet by deployment (kvpilot.shards): each holds the Leases of some
    shards (named after `ha.lease_name`, in `ha.lease_namespace`, held for `ha.lease_duration_s`, renewed every
    `ha.renew_every_s` by `ha.identity`), scrapes, decides and actuates only their deployments, and forwards KEDA's
    calls for the others to their owner. Needs a Kubernetes API, like `ha`."""

    shards: int = Field(default=1, ge=1, le=1024)  # 1: off; N: deployments split by a stable hash into N shards
    # host:port where the other instances reach this one's KEDA gRPC server; default: $POD_IP, else the hostname,
    # with api.grpc_port
    advertise_address: str | None = None
    forward_timeout_s: float = Field(default=2.0, gt=0)  # a KEDA call forwarded to a shard's owner waits this long

    @property
    def enabled(self) -> bool:
        return self.shards > 1


def _default_data_dir() -> Path:
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
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        nested_model_default_partial_update=True,
    )

    environment: Literal["development", "production"] = "development"
    data_dir: Path = Field(default_factory=_default_data_dir)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    collector: CollectorSettings = CollectorSettings()
    detectors: DetectorSettings = DetectorSettings()
    scaler: ScalerSettings = ScalerSettings()
    store: StoreSettings = StoreSettings()
    api: ApiSettings = ApiSettings()
    drains: DrainSettings = DrainSettings()
    ha: HaSettings = HaSettings()
    sharding: ShardingSettings = ShardingSettings()
    keda: KedaSettings = KedaSettings()
    cost: CostSettings = CostSettings()

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
