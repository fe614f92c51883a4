"""`collector.arrivals`: where requests/s per deployment come from — the engines' estimate, or a gateway's request
counter read through PromQL (`kvpilot.runtime.arrivals`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from collector.urls import is_http_url, password_masked
from kvpilot.settings._section import _Section, url_or_unset

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Functions whose answer is no longer the counter: kvpilot computes the rate itself (reset-aware, over
# collector.rate_window_s) and hands the count to the burst floor, so it must read the counter.
_NOT_A_COUNTER = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv|resets)\s*\(")
_KEY = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")


class ArrivalsSettings(_Section):
    """Requests/s per deployment. `engines` (the default): the engines' own counters, requests finished plus the
    change in requests waiting and running, which lurch while replicas join and leave and see nothing at zero
    replicas. `promql`: a gateway's or router's request counter (Envoy, the Gateway API Inference Extension,
    ingress-nginx, ...) read each tick through a Prometheus-compatible API, its series mapped to deployments by their
    labels; a deployment the counter does not name keeps the engines' estimate (docs/scaling.md, "Arrivals from a
    gateway")."""

    source: Literal["engines", "promql"] = Field(
        default="engines",
        description="`engines` (the replicas' counters) or `promql` (a gateway's request counter, `query`).",
    )
    promql_url: str | None = Field(
        default=None,
        description="Base URL of the Prometheus, Thanos or Mimir that scrapes the gateway; unset: "
        "`collector.discovery.promql_url`.",
    )
    query: str = Field(
        default="",
        max_length=16384,
        description="PromQL instant query whose series are the gateway's request counters themselves (not their "
        "rate: kvpilot computes it, reset-aware, over `collector.rate_window_s`), e.g. "
        '`inference_objective_request_total` or `envoy_cluster_upstream_rq_total{envoy_cluster_name=~"llm_.*"}`. '
        "Leave a deployment's series apart (no `sum`): kvpilot sums them after taking out each one's resets, where "
        "a sum in the query reads one gateway pod's restart as a restart of all.",
    )
    deployment_label: str = Field(
        default="deployment",
        description="Label of each series naming its deployment (or, with `deployments`, the value looked up there).",
    )
    namespace_label: str = Field(
        default="namespace", description="Label of each series naming the deployment's namespace (unless `namespace`)."
    )
    namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="The namespace of every series' deployment, for a gateway whose series carry none; unset: "
        "`namespace_label`.",
    )
    deployments: dict[str, str] = Field(
        default_factory=dict,
        description="`deployment_label` value -> `namespace/name`, for a gateway that names what it routes to in its "
        "own words (a model name, an Envoy cluster); series whose value is not listed are left out. Empty: the value "
        "is the deployment's name.",
    )
    max_answer_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest answer read; a larger one fails that tick's read."
    )
    max_sample_age_s: float = Field(
        default=120.0,
        gt=0,
        description="A series whose newest sample is older than this (Prometheus' `timestamp()` of it, asked with "
        "the query) stopped updating, a dead gateway or failed scrapes under a query layer that keeps the last "
        "sample for the lookback: it is not read, and its deployment keeps the engines' estimate rather than a rate "
        "falling to 0. 120 s: twice Prometheus' default scrape interval (1 min); with a 10-30 s scrape, 60 s says it "
        "sooner.",
    )

    @field_validator("promql_url")
    @classmethod
    def _url_is_http(cls, value: str | None) -> str | None:
        """`promql_url` is an http(s) URL with a host"""
        value = url_or_unset(value)
        if value is not None and not is_http_url(value):
            raise ValueError(
                f"must be an http(s) URL with a host, e.g. http://prometheus:9090, got {password_masked(value)[:200]!r}"
            )
        return value

    @field_validator("deployment_label", "namespace_label")
    @classmethod
    def _label_name(cls, value: str) -> str:
        """the labels are Prometheus label names"""
        if not _LABEL_NAME.fullmatch(value):
            raise ValueError(f"must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got {value[:200]!r}")
        return value

    @field_validator("query")
    @classmethod
    def _query_reads_a_counter(cls, value: str) -> str:
        """`query` is an instant vector of counters: not blank, not a rate, not a range, brackets and quotes closed"""
        if value and not value.strip():
            raise ValueError("is blank: give the gateway's request counter, e.g. inference_objective_request_total")
        found = _NOT_A_COUNTER.search(value)
        if found:
            raise ValueError(
                f"reads {found.group(1)}(...), not the counter: give the counter itself (without the function and "
                "its range); kvpilot computes the rate, reset-aware, over collector.rate_window_s, and the burst floor "
                "reads the count"
            )
        unclosed, last = _scan(value)
        if unclosed:
            raise ValueError(f"is not PromQL: {unclosed} ({value[:120]!r})")
        if last == "]":
            raise ValueError(f"ends in a range ({value.strip()[-40:]!r}): give an instant vector, the counter itself")
        return value

    @field_validator("deployments")
    @classmethod
    def _keys_are_deployments(cls, value: dict[str, str]) -> dict[str, str]:
        """every `deployments` value is `namespace/name` as Kubernetes names them"""
        for label, key in value.items():
            if not _KEY.fullmatch(key):
                raise ValueError(
                    f"{label[:100]!r} maps to {key[:200]!r}: must be 'namespace/name' (lower case, digits, '-', '.')"
                )
        return value

    @model_validator(mode="after")
    def _promql_has_a_query(self) -> ArrivalsSettings:
        """`source: promql` needs `query`"""
        if self.source == "promql" and not self.query:
            raise ValueError(
                "source is 'promql' but query is not set: give the gateway's request counter, e.g. "
                "inference_objective_request_total (Gateway API Inference Extension) or "
                "envoy_cluster_upstream_rq_total (Envoy)"
            )
        return self


def _scan(query: str) -> tuple[str | None, str]:
    """(why ``query`` cannot be PromQL by its brackets and quotes alone, or None; its last character outside strings
    and comments): what Prometheus would refuse with ``bad_data`` at every tick, said once at start instead."""
    closing = {"(": ")", "{": "}", "[": "]"}
    stack: list[str] = []
    quote: str | None = None
    escaped = comment = False
    last = ""
    for i, c in enumerate(query):
        if comment:
            comment = c != "\n"
            continue
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\" and quote != "`":
                escaped = True
            elif c == quote:
                quote = None
            continue
        if c in "\"'`":
            quote = c
        elif c == "#":
            comment = True  # to the end of the line
            continue
        elif c in closing:
            stack.append(closing[c])
        elif c in ")}]" and (not stack or stack.pop() != c):
            return f"{c!r} at character {i + 1} closes nothing", last
        if not c.isspace():
            last = c
    if quote is not None:
        return f"a string opened with {quote} is not closed", last
    if stack:
        return f"{stack[-1]!r} missing at the end", last
    return None, last
