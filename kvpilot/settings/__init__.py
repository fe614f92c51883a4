"""kvpilot's configuration: one pydantic-settings class, read once at start from an optional YAML file plus
``KVPILOT_*`` environment variables (nested with ``__``), and validated with errors that name the field.

Precedence, highest first: keyword arguments, nested environment variables (``KVPILOT_COLLECTOR__INTERVAL_S``),
the flat aliases operators expect (``KVPILOT_HTTP_PORT``, ``KVPILOT_DATABASE_URL``, ``KVPILOT_READ_TOKENS``, …),
the YAML file, the defaults.

This module holds the root (`Settings`) and `load_settings`; the flat aliases and the YAML file are read by the
sources in `kvpilot.settings.sources`; each top-level section is a model in the module named after it
(`kvpilot.settings.collector`, `.scaler`, `.cost`, `.runtime`, …).
"""

from __future__ import annotations

import difflib
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from kvpilot.settings._keys import unknown_key_hint
from kvpilot.settings._section import HomePath
from kvpilot.settings.api import ApiSettings
from kvpilot.settings.collector import CollectorSettings
from kvpilot.settings.cost import CostSettings
from kvpilot.settings.detectors import DetectorSettings
from kvpilot.settings.discovery import DiscoverySettings, StaticTarget
from kvpilot.settings.drains import DrainSettings
from kvpilot.settings.ha import HaSettings
from kvpilot.settings.keda import KedaSettings
from kvpilot.settings.runtime import RuntimeSettings
from kvpilot.settings.scaler import DeploymentScaling, ScalerSettings
from kvpilot.settings.sharding import ShardingSettings
from kvpilot.settings.sources import (
    FLAT_ALIASES,
    EnvSource,
    FieldError,
    FlatAliasSource,
    SettingsError,
    YamlFileSource,
    yaml_lines,
)
from kvpilot.settings.store import StoreSettings
from kvpilot.settings.tokens import INSECURE_TOKENS, MIN_TOKEN_ENTROPY_BITS, MIN_TOKEN_LENGTH, token_entropy_bits

__all__ = [
    "ENV_PREFIX",
    "FLAT_ALIASES",
    "MIN_TOKEN_LENGTH",
    "ApiSettings",
    "CollectorSettings",
    "CostSettings",
    "DeploymentScaling",
    "DetectorSettings",
    "DiscoverySettings",
    "DrainSettings",
    "HaSettings",
    "KedaSettings",
    "RuntimeSettings",
    "ScalerSettings",
    "Settings",
    "SettingsError",
    "ShardingSettings",
    "StaticTarget",
    "StoreSettings",
    "load_settings",
]

ENV_PREFIX = "KVPILOT_"


def _default_data_dir() -> Path:
    """`$XDG_DATA_HOME/kvpilot`, else `~/.local/share/kvpilot`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvpilot"


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
    data_dir: HomePath = Field(
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
    # A factory, not an instance built at import: the Lease's namespace and the identity are read from the pod (its
    # service account's namespace file, POD_NAMESPACE, the host name) as each Settings is built.
    ha: HaSettings = Field(default_factory=HaSettings, description="High availability by leader election.")
    sharding: ShardingSettings = Field(default=ShardingSettings(), description="Splitting the fleet between instances.")
    keda: KedaSettings = Field(default=KedaSettings(), description="The KEDA external scaler.")
    cost: CostSettings = Field(default=CostSettings(), description="GPU prices and assignments.")
    runtime: RuntimeSettings = Field(default=RuntimeSettings(), description="The process itself: its event loop.")

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
            EnvSource(settings_cls),  # env_settings, refusing a key given twice in a JSON value
            FlatAliasSource(settings_cls),
            YamlFileSource(settings_cls, _config_file.get()),
        )

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_empty_is_unset(cls, value: object) -> object:
        """an empty `data_dir` is unset, as an empty KVPILOT_* URL is: the default folder"""
        # it was the working directory: a kvpilot started from another folder, or whose container's working directory
        # is no volume, opened an empty store
        return _default_data_dir() if value == "" else value

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
    def _sharded_drains_share_a_store(self) -> Settings:
        """outside development, sharding with drains that act (`drains.dry_run` false) names a database URL"""
        if self.environment == "development" or not self.sharding.enabled or self.drains.dry_run:
            return self
        # an empty KVPILOT_DATABASE_URL means the default SQLite too, and a SQLite URL named outright is a file each
        # instance opens on its own disk: neither is one store for the fleet
        if self.database_url.strip().lower().startswith("sqlite"):
            raise ValueError(
                "sharding.shards > 1 with drains.dry_run false needs KVPILOT_DATABASE_URL (one PostgreSQL for "
                "every instance): on SQLite each instance keeps its drain claims in a file of its own, "
                "so one drain a node and drains.max_concurrent would hold per instance, not for the fleet"
            )
        return self

    @model_validator(mode="after")
    def _lease_kubernetes_takes(self) -> Settings:
        """with `ha` or sharding on, `ha.lease_name` is a Lease name the Kubernetes API takes (at most 63 characters),
        `ha.lease_namespace` a namespace name and `ha.identity` not blank"""
        if self.ha.enabled or self.sharding.enabled:
            self.ha.check_lease()
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
    def bind_host(self) -> str:
        """Where the HTTP and gRPC servers listen: ``api.host`` if set; else loopback while the API is open (no
        tokens: every caller is an admin who may approve drains), so an open API is not on the network by default;
        else every interface."""
        if self.api.host is not None:
            return self.api.host
        return "0.0.0.0" if self.auth_enabled else "127.0.0.1"

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


# A list written the wrong way (a settings file's targets as bare URLs, not `url:` entries) was refused in a line per
# item: 100,001 lines over 13 s for 100,000 targets, the cause scrolled away. The first ones are named, then a count.
MAX_ERRORS_SHOWN = 20


def _format_errors(err: ValidationError, path: Path | None) -> str:
    where = f" (config file {path} and KVPILOT_* environment)" if path else " (KVPILOT_* environment)"
    lines = [f"invalid configuration{where}:"]
    line_of = yaml_lines(path)
    errors = err.errors()
    for e in errors[:MAX_ERRORS_SHOWN]:
        cause = e.get("ctx", {}).get("error")
        full_loc = (*e["loc"], *cause.loc) if isinstance(cause, FieldError) else e["loc"]
        loc = ".".join(str(p) for p in full_loc)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":  # a misspelt key: name the one meant, or the keys there are
            msg += unknown_key_hint(Settings, full_loc)
        line = line_of(full_loc)
        at = f" ({path.name}:{line})" if path is not None and line is not None else ""
        lines.append(f"  {loc}{at}: {msg}" if loc else f"  {msg}")
    if len(errors) > MAX_ERRORS_SHOWN:
        lines.append(f"  ... and {len(errors) - MAX_ERRORS_SHOWN:,} more")
    return "\n".join(lines)


def _unknown_sections() -> list[str]:
    """``KVPILOT_<SECTION>__…`` variables whose section is no setting, one line each. pydantic-settings ignores them
    (a misspelt key under a known section is refused as extra), so ``KVPILOT_COLECTOR__INTERVAL_S=5`` was silently
    without effect. Variables without ``__`` are left alone: other tools' (``KVPILOT_KEDA_TOKEN``, Kubernetes'
    service links ``KVPILOT_PORT_8080_TCP``) share the prefix."""
    sections = sorted(Settings.model_fields)
    lines = []
    for name in sorted(os.environ):
        if not name.upper().startswith(ENV_PREFIX) or "__" not in name:
            continue
        section = name[len(ENV_PREFIX) :].split("__", 1)[0].lower()
        if section in sections:
            continue
        close = difflib.get_close_matches(section, sections, n=1)
        hint = (
            f": did you mean {ENV_PREFIX}{close[0].upper()}__…?" if close else f" (the settings: {', '.join(sections)})"
        )
        lines.append(f"  {name}: no setting is named {section!r}{hint}")
    return lines


# Settings whose keys are names from outside kvpilot (a deployment's "namespace/name" label, a GPU type), matched as
# written: an environment variable name is read without regard to case, so a key with capitals in one is lost.
NAMED_KEYS: tuple[tuple[str, ...], ...] = (
    ("scaler", "deployments"),
    ("cost", "gpus"),
    ("cost", "deployments"),
    ("collector", "arrivals", "deployments"),
)


def _keys_with_capitals() -> list[str]:
    """``KVPILOT_…`` variables that name a key of ``NAMED_KEYS`` with capitals, one line each, saying how to write it.
    pydantic-settings reads variable names in lower case, so ``KVPILOT_SCALER__DEPLOYMENTS__Prod/Chat__MIN_REPLICAS``
    set deployment ``prod/chat``, which a label ``Prod/Chat`` never matches, and ``KVPILOT_COST__GPUS__H100__…`` a
    new GPU type ``h100`` beside the built-in ``H100``, both in silence or with an error about another field."""
    lines = []
    for name in sorted(os.environ):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        parts = name[len(ENV_PREFIX) :].split("__")
        for path in NAMED_KEYS:
            depth = len(path)
            if len(parts) <= depth or tuple(p.lower() for p in parts[:depth]) != path:
                continue
            key = parts[depth]
            if key != key.lower():
                whole = ENV_PREFIX + "__".join(path).upper()
                lines.append(
                    f"  {name}: a variable's name is read in lower case, so this would set {'.'.join(path)} key "
                    f"{key.lower()!r}, not {key!r}; write a key with capitals in the settings file, or as JSON in "
                    f"""{whole}='{{"{key}": {{...}}}}' (a key in lower case may stay in the name)"""
                )
    return lines


def load_settings(config_file: Path | str | None = None, **overrides: Any) -> Settings:
    """Read, validate and return the settings; raise ``SettingsError`` naming every bad field (the first
    ``MAX_ERRORS_SHOWN``, then how many more)."""
    unknown = _unknown_sections() + _keys_with_capitals()
    if unknown:
        raise SettingsError("\n".join(["invalid configuration (KVPILOT_* environment):", *unknown]))
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
