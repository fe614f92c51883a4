"""Turning a decision into replicas: advisory (say what would happen), KEDA (KEDA acts), or direct actuation.

Direct actuation writes `spec.replicas` of the deployment's scale subresource (`deployments/scale`) through the
official Kubernetes client, with optimistic concurrency: read the scale, write it back with the
resourceVersion just read, and on 409 Conflict (someone else, often the HPA or `kubectl scale`, wrote in
between) re-read and try again. Only RBAC `get`/`update` on `deployments/scale` is needed, never on the
Deployment itself. Do not combine it with a KEDA ScaledObject or an HPA on the same deployment: they would
fight over the replica count.

The Kubernetes client is synchronous: from an event loop, call `apply` through `asyncio.to_thread`. Give it a client
built with `retries = False` (as `kvpilot run` does): urllib3's default retries obey a 429's or 503's Retry-After up
to three times, unbounded (`Retry-After: 30` held one call for 90 s); the actuator waits out a Retry-After itself,
only while the call as a whole stays within `request_timeout_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from scaler.decision import Decision
from scaler.publish import scale_target

log = logging.getLogger(__name__)


class ActuationError(Exception):
    """Scaling a deployment failed. `retryable` tells a transient failure (retry with backoff) from a
    permanent one (the deployment is gone, RBAC forbids it: disable and say why)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ActuationResult:
    deployment: str
    mode: str
    previous_replicas: int | None  # what the scale subresource held (advisory: what the decision observed)
    target_replicas: int
    applied: bool  # True only when kvpilot itself changed spec.replicas
    attempts: int  # reads of the scale subresource (more than 1 after resourceVersion conflicts)
    message: str


class Actuator(Protocol):
    def apply(self, decision: Decision) -> ActuationResult: ...


@dataclass(frozen=True, slots=True)
class AdvisoryActuator:
    """Computes and reports what would be done; changes nothing. `mode` "keda" reads the same: KEDA acts."""

    mode: str = "advisory"
    include_warm_pool: bool = True

    def apply(self, decision: Decision) -> ActuationResult:
        target = scale_target(decision, include_warm_pool=self.include_warm_pool)
        current = decision.current_replicas
        verb = "would keep" if current == target else "would scale"
        message = f"{self.mode}: {verb} {decision.deployment} {current} -> {target} replicas ({decision.reason})"
        log.info(message)
        return ActuationResult(decision.deployment, self.mode, current, target, False, 0, message)


class ScaleSubresourceActuator:
    """Direct actuation through `deployments/scale` (`kubernetes.client.AppsV1Api`)."""

    mode = "direct"

    def __init__(
        self, apps: Any, *, include_warm_pool: bool = True, max_attempts: int = 5, request_timeout_s: float = 10.0
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"error parsing direct actuation settings: max_attempts must be >= 1, got {max_attempts}")
        if not request_timeout_s > 0:
            raise ValueError(
                f"error parsing direct actuation settings: request_timeout_s must be > 0, got {request_timeout_s}"
            )
        self._apps = apps
        self._include_warm_pool = include_warm_pool
        self._max_attempts = max_attempts
        # The client waits for ever by default: an API server that took the request and never answered held the
        # actuation pass, every later deployment's scaling and every drain request with it, until kvpilot restarted.
        self._request_timeout_s = request_timeout_s

    def apply(self, decision: Decision) -> ActuationResult:
        namespace, _, name = decision.deployment.partition("/")
        target = scale_target(decision, include_warm_pool=self._include_warm_pool)
        deadline = time.monotonic() + self._request_timeout_s  # for waiting out the server's Retry-After
        for attempt in range(1, self._max_attempts + 1):
            scale = self._call(
                "read", decision.deployment, deadline, self._apps.read_namespaced_deployment_scale, name, namespace
            )
            if scale.spec is None:
                raise ActuationError(
                    f"read deployments/scale of {decision.deployment}: no spec in the answer", retryable=True
                )
            current = scale.spec.replicas
            if current == target:
                message = f"direct: {decision.deployment} already at {target} replicas"
                return ActuationResult(decision.deployment, self.mode, current, target, False, attempt, message)
            scale.spec.replicas = target  # keeps metadata.resourceVersion from the read: optimistic concurrency
            try:
                self._call(
                    "update",
                    decision.deployment,
                    deadline,
                    self._apps.replace_namespaced_deployment_scale,
                    name,
                    namespace,
                    scale,
                )
            except _Conflict:
                log.info("direct: %s changed under us (409), re-reading (attempt %d)", decision.deployment, attempt)
                continue
            message = f"direct: scaled {decision.deployment} {current} -> {target} replicas ({decision.reason})"
            log.info(message)
            return ActuationResult(decision.deployment, self.mode, current, target, True, attempt, message)
        raise ActuationError(
            f"scaling {decision.deployment} to {target}: still conflicting after {self._max_attempts} attempts "
            "(something else keeps writing its replica count; is an HPA or KEDA also scaling it?)",
            retryable=True,
        )

    def _call(self, verb: str, deployment: str, deadline: float, fn: Callable[..., Any], *args: Any) -> Any:
        for _ in range(MAX_RETRY_AFTERS):
            try:
                return self._call_once(verb, deployment, fn, *args)
            except _RetryAfter as asked:
                wait, left = asked.seconds, deadline - time.monotonic()
                if wait > left:  # past what this scaling call may wait: the next pass is the retry
                    raise ActuationError(
                        f"{verb} deployments/scale of {deployment}: the API server asks to wait {wait:g} s "
                        f"(HTTP {asked.status}, Retry-After), more than the {max(left, 0):.1f} s left of "
                        f"request_timeout_s ({self._request_timeout_s:g} s); retried next pass",
                        retryable=True,
                    ) from None
                log.info("direct: %s %s asked to wait %g s (HTTP %d), waiting", verb, deployment, wait, asked.status)
                time.sleep(wait)
        raise ActuationError(
            f"{verb} deployments/scale of {deployment}: the API server still asks to wait after "
            f"{MAX_RETRY_AFTERS} tries (HTTP 429/503, Retry-After); retried next pass",
            retryable=True,
        )

    def _call_once(self, verb: str, deployment: str, fn: Callable[..., Any], *args: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self._request_timeout_s)
        except ApiException as error:
            status = int(error.status or 0)
            if status == 409 and verb == "update":
                raise _Conflict() from None
            wait = retry_after_s(error) if status in (429, 503) else None
            if wait is not None:
                raise _RetryAfter(status, wait) from None
            reason = _REASONS.get(status)
            if reason is None:
                raise ActuationError(
                    f"{verb} deployments/scale of {deployment}: HTTP {status} {error.reason}", retryable=True
                ) from error
            raise ActuationError(f"{verb} deployments/scale of {deployment}: {reason}", retryable=False) from error
        except Exception as error:  # no answer in time, the connection refused or cut, an answer not a Scale: retried
            # (was an exception out of the pass: a traceback each tick, and the deployments after this one not scaled)
            words = f"{type(error).__name__}: {error}"
            words = words if len(words) <= 300 else words[:300] + "..."
            raise ActuationError(f"{verb} deployments/scale of {deployment}: {words}", retryable=True) from error


class _Conflict(Exception):
    pass


class _RetryAfter(Exception):
    def __init__(self, status: int, seconds: float) -> None:
        self.status, self.seconds = status, seconds


MAX_RETRY_AFTERS = 4  # tries of one call the server answers "wait" (urllib3's default: 3 retries)


def retry_after_s(error: Any) -> float | None:
    """A 429's or 503's Retry-After in seconds (delay-seconds or an HTTP date, RFC 9110 10.2.3); None when absent or
    unreadable (then the answer is an ordinary retryable HTTP error)."""
    from urllib3.util.retry import Retry

    value = (getattr(error, "headers", None) or {}).get("Retry-After")
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        return float(Retry().parse_retry_after(value))
    except Exception:  # InvalidHeader, or an HTTP date out of range
        return None


_REASONS = {
    404: "deployment not found (404): it was deleted or renamed, or the namespace is wrong",
    403: "forbidden (403): kvpilot's service account needs get and update on deployments/scale",
    422: "rejected as invalid (422)",
}


def _advisory(*, include_warm_pool: bool = True, **_: Any) -> Actuator:
    return AdvisoryActuator(include_warm_pool=include_warm_pool)


def _keda(*, include_warm_pool: bool = True, **_: Any) -> Actuator:
    return AdvisoryActuator(mode="keda", include_warm_pool=include_warm_pool)


def _direct(*, apps: Any = None, **settings: Any) -> Actuator:
    if apps is None:
        from kubernetes import client

        configuration = client.Configuration.get_default_copy()
        configuration.retries = False  # a 429's Retry-After is the actuator's to wait out, within request_timeout_s
        apps = client.AppsV1Api(client.ApiClient(configuration))
    return ScaleSubresourceActuator(apps, **settings)


# mode -> factory; `apps` (an AppsV1Api) and ScaleSubresourceActuator's settings are passed as keywords.
ACTUATORS: dict[str, Callable[..., Actuator]] = {"advisory": _advisory, "keda": _keda, "direct": _direct}


def make_actuator(mode: str, **kwargs: Any) -> Actuator:
    try:
        factory = ACTUATORS[mode]
    except KeyError:
        raise ValueError(f"unknown scaling mode {mode!r}; choose one of {', '.join(sorted(ACTUATORS))}") from None
    return factory(**kwargs)
