"""`collector.discovery`: where the targets come from (static, Kubernetes pods, PromQL, the built-in simulator)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from collector.discovery.static import same_replica
from collector.urls import is_http_url, password_masked, redacted
from kvpilot.settings._section import HomePath, _Section, url_or_unset
from store.fields import TargetSpec

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


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
    static_file: HomePath | None = Field(
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
    promql_vanished_lookback_s: float = Field(
        default=900.0,
        gt=0,
        allow_inf_nan=False,
        description="`aggregates` mode: a GPU its exporter listed within this many seconds and does not list now "
        "(its exporter up) is `vanished`; Prometheus reads every GPU series over it, so its cost grows with the "
        "GPUs and with it (docs/scaling-large-fleets.md).",
    )
    promql_vanished_every_s: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="`aggregates` mode: how often the vanished GPUs are asked for (the last answer is handed "
        "again in between); less than `promql_vanished_lookback_s`.",
    )
    promql_replica_labels: tuple[str, ...] = Field(
        default=("prometheus_replica", "replica", "__replica__"),
        max_length=16,
        description="External labels that tell apart the copies of one series kept by several Prometheus servers (an "
        "HA pair behind a query layer that does not deduplicate): series that differ only in these are read once, "
        "the copy whose labels sort first, never summed (docs/scaling-large-fleets.md).",
    )
    promql_kube_state_metrics: bool = Field(
        default=True,
        description="Read the deployments' replica counts and rollout status from kube-state-metrics' "
        "`kube_deployment_*` series in the same Prometheus, where they exist (one line is logged when they do not); "
        "`false`: never ask (docs/scaling-large-fleets.md).",
    )
    simulator_replicas: int = Field(
        default=4, ge=1, le=1000, description="Replicas of the built-in simulator (`kind: simulator`)."
    )
    simulator_trace: HomePath | None = Field(
        default=None,
        description="Trace the simulator replays (a file, or `synthetic[:k=v]`); unset: the simulator's built-in "
        "default.",
    )

    @field_validator("promql_url")
    @classmethod
    def _promql_url_is_http(cls, value: str | None) -> str | None:
        """`promql_url` is an http(s) URL with a host (and a port within 1-65535)"""
        value = url_or_unset(value)  # empty: unset (then `kind: promql` says it needs one); blank: refused
        if value is None:
            return value
        if not is_http_url(value):  # was accepted, and every tick failed (`http://[::1`: a traceback a tick)
            raise ValueError(
                f"must be an http(s) URL with a host, e.g. http://prometheus:9090, got {password_masked(value)[:200]!r}"
            )
        return value

    @field_validator("static_targets")
    @classmethod
    def _static_urls_once(cls, value: tuple[StaticTarget, ...]) -> tuple[StaticTarget, ...]:
        """a URL is listed once in `static_targets`, and an engine's namespace and pod once"""
        # as the targets file refuses them: the second URL was dropped in silence, its deployment left with no
        # replica; a second page under one pod was read as the same replica (collector.discovery.static.same_replica)
        seen: dict[str, int] = {}
        pods: dict[tuple[str, str], str] = {}
        for i, target in enumerate(value):
            if target.url in seen:
                raise ValueError(f"target {i}: url {redacted(target.url)} is already target {seen[target.url]}")
            seen[target.url] = i
            twin = same_replica(target, pods)
            if twin is not None:
                raise ValueError(f"target {i}: pod {twin}")
            pods.setdefault((target.namespace, target.pod), f"target {i}")
        return value

    @field_validator("promql_replica_labels")
    @classmethod
    def _replica_labels_are_label_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """`promql_replica_labels` are Prometheus label names"""
        for name in value:
            if not _LABEL_NAME.fullmatch(name):
                raise ValueError(f"must be Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*), got {name[:200]!r}")
        return value

    @model_validator(mode="after")
    def _source_configured(self) -> DiscoverySettings:
        """`kind: promql` needs `promql_url`"""
        if self.kind == "promql" and not self.promql_url:
            raise ValueError("discovery.kind is 'promql' but discovery.promql_url is not set")
        return self

    @model_validator(mode="after")
    def _vanished_lookback_past_interval(self) -> DiscoverySettings:
        """`promql_vanished_lookback_s` > `promql_vanished_every_s`"""
        # asked less often than the lookback, a GPU gone between two asks is never selected
        if not self.promql_vanished_lookback_s > self.promql_vanished_every_s:
            raise ValueError(
                "discovery.promql_vanished_lookback_s must be greater than discovery.promql_vanished_every_s, got "
                f"{self.promql_vanished_lookback_s} <= {self.promql_vanished_every_s}"
            )
        return self
