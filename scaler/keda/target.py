"""What one KEDA trigger asks for: the deployment, the metric, and the arithmetic that turns a decision into it.

KEDA sends the trigger's `metadata` with every call (`ScaledObjectRef.scalerMetadata`). It is parsed once per
distinct ScaledObjectRef (cached), failing with a message that names the offending key.

The arithmetic. KEDA builds an HPA External metric with an `AverageValue` target of `targetSize`, and the HPA
computes `desired = ceil(metricValue / targetSize)`. kvpilot reports `metricValue = replicas × targetSize`,
so the HPA arrives at exactly `replicas` (the decision's desired count, plus its warm pool unless
`includeWarmPool: "false"`). With the default `targetSize` 1 the metric value *is* the replica count.
KEDA hands both numbers to the HPA as milli-quantities, truncating `int64(x * 1000)`; `targetSize` is therefore
held to whole milli-units, and where float error would make it or the value truncate one milli-unit low (which,
with a small target, would lose a replica) it is nudged up to the next float that truncates right. The HPA
skips any change whose ratio `metricValue / (targetSize × currentReplicas)` lies within its tolerance (10% by
default): going from 10 to 11 replicas (ratio 1.10) is swallowed. docs/keda.md shows the `behavior` settings
that prevent that.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from collector.roles import BOTH, ROLES, parse_role, pool_key
from scaler.decision import Decision
from scaler.publish import scale_target

DEFAULT_METRIC_NAME = "kvpilot-replicas"

# Keys KEDA itself puts in the trigger metadata it forwards (external / external-push triggers): kedacore/keda,
# pkg/scalers/external_scaler.go (commit 067b4c6040e07ce1eca24c381cf1980741e90ea2), externalScalerMetadata.
_KEDA_KEYS = frozenset({"scalerAddress", "enableTLS", "unsafeSsl"})
_OUR_KEYS = frozenset({"deployment", "pool", "metricName", "targetSize", "activationReplicas", "includeWarmPool"})
# `xFromEnv: VAR`: KEDA forwards the key unchanged with the value of VAR in the scale target's container
# environment, and drops the key when VAR is unset or empty (parseExternalScalerMetadata, same file and commit).
# Each of our keys may come that way; `bearerTokenFromEnv` only that way, so no token sits in a ScaledObject.
_FROM_ENV = "FromEnv"
BEARER_TOKEN_KEY = "bearerTokenFromEnv"
# Not forwarded by KEDA (it is the trigger's `metricType` field, not metadata), but refused here when an operator
# repeats it in the metadata as `Value`: kvpilot's arithmetic needs the HPA's AverageValue target.
_METRIC_TYPE = "metricType"
# Kubernetes object names, the one definition the gRPC metadata and the metrics-api route's path both check: a
# namespace is a DNS label (RFC 1123, at most 63 characters), a Deployment name a DNS subdomain (at most 253).
NAMESPACE_PATTERN = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
NAME_PATTERN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
_NAMESPACE = re.compile(NAMESPACE_PATTERN)
_NAME = re.compile(NAME_PATTERN)
_METRIC_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9._]{0,198}[A-Za-z0-9])?")
_BOOLEANS = {"true": True, "false": False}


class MetadataError(ValueError):
    """The ScaledObject's trigger metadata cannot be used (maps to gRPC INVALID_ARGUMENT)."""


@dataclass(frozen=True, slots=True)
class ScalerTarget:
    """One trigger's parsed settings."""

    # "namespace/name" of the kvpilot-managed deployment whose decision is served; "namespace/name@prefill" (@decode)
    # for one pool of a disaggregated deployment (metadata `pool`, collector.roles), one ScaledObject per pool
    deployment: str
    metric_name: str
    target_size: float  # HPA AverageValue target per replica, a whole number of milli-units
    activation_replicas: float  # active (0 -> 1 allowed) only when replicas > this; KEDA's activation habit
    include_warm_pool: bool

    def replicas(self, decision: Decision) -> int:
        """The replica count to ask the HPA for: desired, plus the warm pool being loaded for the horizon."""
        return scale_target(decision, include_warm_pool=self.include_warm_pool)

    def metric_value(self, decision: Decision) -> float:
        """`replicas × targetSize`, such that HPA's ceil(value / targetSize) on milli-quantities is `replicas`."""
        return _truncates_to(self.replicas(decision) * round(self.target_size * 1000))

    def is_active(self, decision: Decision) -> bool:
        return self.replicas(decision) > self.activation_replicas


def int_field(value: float) -> int:
    """The deprecated int64 field, for KEDA versions that read only it (exact for integer `targetSize`)."""
    return math.ceil(value - 1e-6)


def _truncates_to(milli: int) -> float:
    """The float nearest milli/1000 that KEDA's int64(x * 1000) truncates to exactly `milli`."""
    value = milli / 1000
    while math.trunc(value * 1000) < milli:  # at most a few ulps
        value = math.nextafter(value, math.inf)
    return value


# A ScaledObjectRef KEDA sends is some hundreds of characters (names, a few keys, an address, a token). One larger than
# this is parsed at each call, not cached: the cache keeps its 16,384 refs whole, and a ref may be up to a call's 8 KiB
# (scaler.keda.server.MAX_REQUEST_BYTES; 64 KiB before session 31, 1 MiB before session 28: a name of any length beside
# a `deployment` key, a `scalerAddress` of any length). 300 distinct calls with 0.9 MB names grew `kvpilot run` by
# 337 MB, never released; 16,384 of them would have held 15 GB.
CACHED_REF_MAX_CHARS = 4096


def parse_target(name: str, namespace: str, metadata: Mapping[str, str]) -> ScalerTarget:
    """Parses one ScaledObjectRef (cached: KEDA sends the same one every polling interval)."""
    items = tuple(sorted(metadata.items()))
    if len(name) + len(namespace) + sum(len(k) + len(v) for k, v in items) > CACHED_REF_MAX_CHARS:
        return _parse_cached.__wrapped__(name, namespace, items)
    return _parse_cached(name, namespace, items)


@lru_cache(maxsize=16384)
def _parse_cached(name: str, namespace: str, items: tuple[tuple[str, str], ...]) -> ScalerTarget:
    where = f"scaledObject {namespace}/{name}"
    metadata = _resolve_from_env(dict(items), where)
    unknown = sorted(k for k in metadata if k not in _OUR_KEYS and k not in _KEDA_KEYS and k != _METRIC_TYPE)
    if unknown:
        raise MetadataError(
            f"{where}: unknown metadata key(s) {', '.join(map(repr, unknown))}; "
            f"kvpilot reads {', '.join(sorted(_OUR_KEYS))} (each also as <key>FromEnv) and {BEARER_TOKEN_KEY}"
        )
    metric_type = metadata.get(_METRIC_TYPE)
    if metric_type is not None and metric_type != "AverageValue":
        raise MetadataError(
            f"{where}: metricType {metric_type!r}: kvpilot's answer is a replica count for an AverageValue target "
            "(the HPA divides it by targetSize); with Value the HPA multiplies it by the current replicas"
        )
    return ScalerTarget(
        deployment=pool_key(_deployment(name, namespace, metadata.get("deployment"), where), _pool(metadata, where)),
        metric_name=_metric_name(metadata.get("metricName", DEFAULT_METRIC_NAME), where),
        target_size=_milli(_number(metadata, "targetSize", 1.0, where, minimum_exclusive=0.0), "targetSize", where),
        activation_replicas=_number(metadata, "activationReplicas", 0.0, where, minimum_inclusive=0.0),
        include_warm_pool=_boolean(metadata, "includeWarmPool", True, where),
    )


def _resolve_from_env(metadata: dict[str, str], where: str) -> dict[str, str]:
    """Our keys as given, whether written in the trigger or resolved by KEDA from `<key>FromEnv`."""
    out: dict[str, str] = {}
    for key, value in metadata.items():
        if key == BEARER_TOKEN_KEY:
            continue  # checked by the servicer, never part of the target (nor of an error message)
        if key == "bearerToken":
            raise MetadataError(
                f"{where}: `bearerToken` would put the token in the ScaledObject; use `{BEARER_TOKEN_KEY}` "
                "naming an environment variable of the scale target that holds it (from a Secret)"
            )
        if key.endswith(_FROM_ENV) and key != _FROM_ENV:
            base = key.removesuffix(_FROM_ENV)
            if base not in _OUR_KEYS:
                raise MetadataError(
                    f"{where}: `{key}`: kvpilot reads no `{base}`; *FromEnv works for {', '.join(sorted(_OUR_KEYS))}"
                )
            if base in metadata:
                raise MetadataError(f"{where}: both `{base}` and `{key}` are set; keep one")
            out[base] = value
        else:
            out[key] = value
    return out


def _deployment(name: str, namespace: str, raw: str | None, where: str) -> str:
    if raw is None:
        if not name or not namespace:
            raise MetadataError(
                "scaledObjectRef has no name/namespace and no `deployment` metadata: cannot tell which deployment"
            )
        dep_namespace, dep_name = namespace, name
    else:
        raw = raw.strip()
        dep_namespace, sep, dep_name = raw.rpartition("/")
        if not sep:
            dep_namespace = namespace
        if not dep_namespace:
            raise MetadataError(f"{where}: `deployment` {raw!r} has no namespace and the scaledObjectRef has none")
    if not _NAMESPACE.fullmatch(dep_namespace):
        raise MetadataError(f"{where}: namespace {dep_namespace!r} is not a valid Kubernetes namespace name")
    if not _NAME.fullmatch(dep_name):
        raise MetadataError(f"{where}: deployment name {dep_name!r} is not a valid Kubernetes object name")
    return f"{dep_namespace}/{dep_name}"


def _pool(metadata: Mapping[str, str], where: str) -> str:
    raw = metadata.get("pool")
    if raw is None:
        return BOTH
    try:
        return parse_role(raw)
    except ValueError:
        raise MetadataError(f"{where}: `pool` {raw!r} must be one of {', '.join(ROLES)}") from None


def _milli(value: float, key: str, where: str) -> float:
    milli = round(value * 1000)
    if milli < 1:
        raise MetadataError(f"{where}: `{key}` {value:g} is below KEDA's resolution of 0.001")
    return _truncates_to(milli)


def _metric_name(raw: str, where: str) -> str:
    if not _METRIC_NAME.fullmatch(raw):
        raise MetadataError(f"{where}: `metricName` {raw!r} must be 1-200 characters of letters, digits, '-', '_', '.'")
    return raw


def _number(
    metadata: Mapping[str, str],
    key: str,
    default: float,
    where: str,
    *,
    minimum_exclusive: float | None = None,
    minimum_inclusive: float | None = None,
) -> float:
    raw = metadata.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise MetadataError(f"{where}: `{key}` {raw!r} is not a number") from None
    if not math.isfinite(value) or value > 1e12:
        raise MetadataError(f"{where}: `{key}` {raw!r} must be a finite number below 1e12")
    if minimum_exclusive is not None and value <= minimum_exclusive:
        raise MetadataError(f"{where}: `{key}` {raw!r} must be > {minimum_exclusive:g}")
    if minimum_inclusive is not None and value < minimum_inclusive:
        raise MetadataError(f"{where}: `{key}` {raw!r} must be >= {minimum_inclusive:g}")
    return value


def _boolean(metadata: Mapping[str, str], key: str, default: bool, where: str) -> bool:
    raw = metadata.get(key)
    if raw is None:
        return default
    try:
        return _BOOLEANS[raw.strip().lower()]
    except KeyError:
        raise MetadataError(f'{where}: `{key}` {raw!r} must be "true" or "false"') from None
