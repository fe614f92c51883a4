"""Drain a node through the official Kubernetes client: cordon, taint, evict its pods honouring
PodDisruptionBudgets (a 429 is retried with backoff until a deadline). Uncordoning is the operator's, by kubectl
(the runbook KvpilotGpuDrainRequired says how, taint included).

What to drain is decided elsewhere (``detectors.drain_rails``); this module only executes, and returns an
audit record for every step it took, retried or skipped. Dry-run lists what it would do and changes nothing.
Node updates are read-modify-replace with the node's resourceVersion, so a concurrent writer (another
controller, an operator's kubectl) yields a 409 that is retried on a fresh read instead of being overwritten.

A drain runs in a worker thread (``kvpilot.actuation``'s drain worker, never the control loop). Given an
``interrupt`` event, its 429 backoff waits on that event instead of sleeping, so a cancel or SIGTERM ends a drain
whose PodDisruptionBudget keeps refusing at once rather than after the backoff (up to ``Backoff.deadline_s``).

Give it a client built with ``retries = False`` (as ``kvpilot run`` does): urllib3's default retries obey a 429's or
503's Retry-After on the node read, the node update and the pod list up to three times, unbounded and deaf to a cancel
(``Retry-After: 30`` held a drain for 90 s). The drainer waits out a Retry-After itself, through the same interruptible
wait as its backoff, only while the call stays within ``request_timeout_s``; a longer one ends the drain with
``DrainResult.busy`` (the worker puts it back to approved and tries it again after a backoff, at least the Retry-After).
Evictions are POSTs, which urllib3 never retries: a PodDisruptionBudget's 429 is the backoff's, as before, one audit
step for its refusals (not one per try), waiting at least a Retry-After the 429 carries. An eviction's 429 is a
budget's refusal only when its Status names one (``budget_refusal``); any other 429 is the API server shedding load
(API Priority and Fairness), backed off the same way and worded as throttling, not as a PDB.

Before any eviction it refuses, as ``kubectl drain`` does without ``--force``, a node holding a pod with no controller
(evicted, nothing would recreate it); and it keeps each ready pod whose eviction would leave its workload no ready
replica, read from the API server (a Deployment through its ReplicaSet, a ReplicaSet of no Deployment, a StatefulSet:
their ``status.readyReplicas``): the drain rails read a snapshot that may be old and, with sharding, holds only the
instance's own deployments.

Before each eviction request it tells ``on_evict`` the pod and the time: kvpilot's own removal, which the rollout
stage must not read as a rolling update draining the pod (``scaler.rollout_stage.RolloutStage.note_removed``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from collector.clock import Clock, WallClock
from collector.discovery.pager import list_pages, read_model, ref
from kvpilot.actuation.audit import AuditRecord, Outcome
from kvpilot.actuation.scale import MAX_RETRY_AFTERS, retry_after_s

if TYPE_CHECKING:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
# The client is imported where a drain runs (~33 MB a process that never drains does not pay for).

log = logging.getLogger(__name__)

TAINT_KEY = "kvpilot.io/unhealthy-gpu"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# policy/v1 DisruptionBudgetCause: the cause an eviction's 429 Status carries when a PodDisruptionBudget refused it.
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_STATUS_BODY_MAX = 65536  # a Status is a few hundred bytes; a longer body is not read for a cause


def budget_refusal(error: Any) -> str | None:
    """What a PodDisruptionBudget said when it refused an eviction (its cause's words, or its message without one),
    or None when the 429 is not a budget's. The API server's eviction handler (pkg/registry/core/pod/storage/
    eviction.go) answers a Status "Cannot evict pod as it would violate the pod's disruption budget." whose
    ``details.causes`` hold one of reason ``DisruptionBudget`` ("The disruption budget chat needs 2 healthy pods and
    has 2 currently"; "... is still being processed by the server." with a Retry-After of 10 s). API Priority and
    Fairness and ``--max-requests-inflight`` answer 429 "Too many requests, please try again later." as plain text
    with a Retry-After: the API server shedding load, no budget involved."""
    body = getattr(error, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or len(body) > _STATUS_BODY_MAX:
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return None  # plain text: the API server's own throttling
    if not isinstance(status, dict) or status.get("kind") != "Status":
        return None
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, dict) and cause.get("reason") == DISRUPTION_BUDGET_CAUSE:
            return str(cause.get("message") or status.get("message") or "refused by its disruption budget")[:512]
    message = status.get("message")
    if isinstance(message, str) and "disruption budget" in message:  # a server that names no cause (before 1.19)
        return message[:512]
    return None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff for 429 (PDB) and 409 (conflict) answers."""

    initial_s: float = 1.0
    factor: float = 2.0
    max_s: float = 30.0
    deadline_s: float = 600.0  # give up evicting a pod after this long (the PDB keeps refusing)
    max_conflicts: int = 5  # resourceVersion conflicts on one node update before giving up

    def delay(self, attempt: int) -> float:
        return float(min(self.max_s, self.initial_s * self.factor**attempt))


@dataclass(slots=True)
class DrainResult:
    node: str
    dry_run: bool
    records: list[AuditRecord] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: bool = False
    cancelled: bool = False
    busy: str = ""  # the API server asked to wait longer than a call may take: why (tried again after a backoff)
    retry_after_s: float | None = None  # with busy: how long it asked to wait (Retry-After), when it said

    @property
    def complete(self) -> bool:
        return not self.failed and not self.blocked and not self.cancelled and not self.busy


class NodeDrainer:
    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        backoff: Backoff = Backoff(),
        actor: str = "kvpilot",
        taint_key: str = TAINT_KEY,
        on_evict: Callable[[str, float], None] | None = None,
        request_timeout_s: float = 10.0,
    ) -> None:
        self._core = core
        # the client waits for ever by default: an API server that took a request and never answered held the drain,
        # deaf to the operator's cancel, and every approved drain after it
        self._timeout = request_timeout_s
        self._on_evict = on_evict  # ("namespace/name", now) before each eviction request, retries included
        self._clock = clock or WallClock()
        self._sleep = sleep
        self._backoff = backoff
        self._actor = actor
        self._taint_key = taint_key
        self._wait: Callable[[float], object] = self._waiter(None)
        self._stop: Callable[[], bool] = lambda: False
        self._on_step: Callable[[AuditRecord], None] | None = None

    # -- public ----------------------------------------------------------------------------------------

    def drain(
        self,
        node: str,
        *,
        dry_run: bool = True,
        reason: str = "",
        should_stop: Callable[[], bool] | None = None,
        interrupt: threading.Event | None = None,
        on_step: Callable[[AuditRecord], None] | None = None,
    ) -> DrainResult:
        """Cordon and taint ``node``, then evict every pod on it that a drain should move.

        ``should_stop`` (default: ``interrupt`` is set) is asked before each eviction and after each backoff: an
        operator's cancel or a shutdown stops further evictions (the node stays cordoned; what was already
        evicted is in the records). With ``interrupt`` and no injected ``sleep``, a backoff ends when it is set.
        ``on_step`` is told each record as it is made, in this thread (the worker writes them while an eviction
        waits)."""
        result = DrainResult(node=node, dry_run=dry_run)
        stop = should_stop or (interrupt.is_set if interrupt is not None else (lambda: False))
        self._wait, self._stop, self._on_step = self._waiter(interrupt), stop, on_step
        try:
            self._steps(node, result, reason, stop)
        except _Busy as e:  # a longer wait than a call may take: the drain is tried again on the worker's next pass
            self._record(result, e.step, node, Outcome.RETRY, e.words)
            result.busy, result.retry_after_s = e.words, e.wait
        except _Stopped as e:  # cancelled while the API server's Retry-After was waited out
            self._record(result, e.step, node, Outcome.SKIPPED, "cancelled while the API server asked to wait")
            result.cancelled = True
        except Exception as e:  # no answer in time, a connection refused or cut, an answer that is no Node or PodList
            # Ends the drain failed with the steps before it in the records (raised, they were lost: the audit said
            # "drain raised" and not that the node was cordoned and which pods were evicted).
            words = f"{type(e).__name__}: {e}"
            words = words if len(words) <= 300 else words[:300] + "..."
            self._record(result, "api", node, Outcome.ERROR, f"a Kubernetes API call failed: {words}")
            result.failed = True
        return result

    def cordoned(self) -> set[str] | None:
        """The nodes still cordoned (``spec.unschedulable``) and carrying kvpilot's taint: nodes kvpilot took out of the
        pool that no operator has uncordoned yet, what ``drains.budget`` counts besides its window. One field-selected
        list (``spec.unschedulable=true``, a handful of nodes), no Retry-After waited (the actuator pass must not
        stall on it); None when it fails, for the caller to fall back on the store's count alone."""
        try:
            # in pages, each node read off its JSON for the three fields counted: no model to refuse one odd node
            names = list_pages(
                self._core.list_node, read=self._cordoned_name, kind="NodeList",
                field_selector="spec.unschedulable=true", _request_timeout=self._timeout,
            ).items  # fmt: skip
        except Exception as e:  # no answer, refused (403: no list on nodes), shedding load, garbled
            words = f"{type(e).__name__}: {e}"
            log.warning(
                "listing the cordoned nodes failed (%s): drains.budget counts the store's drains only", words[:300]
            )
            return None
        return set(names)

    def _cordoned_name(self, node: Any) -> str | None:
        """A listed node's name when it is cordoned and carries kvpilot's taint (None otherwise), read off the JSON the
        API server sent: where a field is not what the API says, that node alone is not counted."""
        if not isinstance(node, dict):  # already read into the client's model (a test double's answer)
            from kubernetes import client

            node = client.ApiClient().sanitize_for_serialization(node)  # type: ignore[no-untyped-call]
        meta, spec = node.get("metadata"), node.get("spec")
        if not isinstance(meta, dict) or not isinstance(spec, dict) or spec.get("unschedulable") is not True:
            return None
        name, taints = meta.get("name"), spec.get("taints")
        if not isinstance(name, str) or not name or not isinstance(taints, list):
            return None
        return name if any(isinstance(t, dict) and t.get("key") == self._taint_key for t in taints) else None

    def _steps(self, node: str, result: DrainResult, reason: str, stop: Callable[[], bool]) -> None:
        if not self._cordon(node, result, reason=reason):
            return
        pods = self._pods_to_evict(node, result)
        if pods is None:
            return
        refused = self._last_ready_replicas(node, pods, result)
        if refused is None:
            return
        for i, (namespace, name, _) in enumerate(pods):
            if stop():
                self._cancel(result, len(pods) - i)
                return
            ref = f"{namespace}/{name}"
            if ref in refused:
                self._record(result, "evict", ref, Outcome.BLOCKED, refused[ref])
                result.blocked.append(ref)
                continue
            self._evict(node, namespace, name, result, stop)
            if result.cancelled:
                return

    def _waiter(self, interrupt: threading.Event | None) -> Callable[[float], object]:
        if self._sleep is not None:  # injected (tests, virtual time)
            return self._sleep
        if interrupt is not None:
            return interrupt.wait
        return time.sleep

    def _cancel(self, result: DrainResult, left: int) -> None:
        self._record(result, "evict", result.node, Outcome.SKIPPED, f"cancelled; {left} pod(s) not evicted")
        result.cancelled = True

    # -- steps -----------------------------------------------------------------------------------------

    def _record(self, result: DrainResult, step: str, target: str, outcome: Outcome, message: str, **ev: Any) -> None:
        record = AuditRecord(
            at=self._clock.now(),
            node=result.node,
            step=step,
            target=target,
            outcome=outcome,
            message=message,
            dry_run=result.dry_run,
            actor=self._actor,
            evidence={k: v for k, v in ev.items() if isinstance(v, str | float | int) or v is None},
        )
        result.records.append(record)
        if self._on_step is not None:
            self._on_step(record)

    def _cordon(self, node: str, result: DrainResult, *, reason: str) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        step = "cordon"
        for attempt in range(self._backoff.max_conflicts + 1):
            try:
                obj = self._call(step, f"read node {node}", self._core.read_node, node)
            except ApiException as e:
                return self._node_error(result, step, node, e)
            spec = obj.spec = obj.spec or client.V1NodeSpec()
            taints = [t for t in (spec.taints or []) if t.key != self._taint_key]
            already = bool(spec.unschedulable) and len(taints) + 1 == len(spec.taints or [])
            taints.append(client.V1Taint(key=self._taint_key, value="true", effect="NoSchedule"))
            if already:
                self._record(result, step, node, Outcome.SKIPPED, f"{node} already cordoned")
                return True
            if result.dry_run:
                self._record(result, step, node, Outcome.DRY_RUN, f"would {step} {node}: {reason}".rstrip(": "))
                return True
            spec.unschedulable = True
            spec.taints = taints
            try:
                self._call(step, f"update node {node}", self._core.replace_node, node, obj)
            except ApiException as e:
                if e.status == 409:
                    self._record(
                        result, step, node, Outcome.RETRY, f"conflict updating {node}; re-reading", attempt=attempt
                    )
                    continue
                return self._node_error(result, step, node, e)
            done = f"cordoned {node} and tainted {self._taint_key}"
            self._record(result, step, node, Outcome.OK, f"{done}: {reason}".rstrip(": "))
            return True
        self._record(result, step, node, Outcome.ERROR, f"gave up after {self._backoff.max_conflicts} conflicts")
        result.failed = True
        return False

    def _call(self, step: str, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """A node read, node update or pod list: each try waits at most ``request_timeout_s``; a 429's or 503's
        Retry-After is waited out (interruptibly) only while the call as a whole stays within it, at most
        ``MAX_RETRY_AFTERS`` tries. A longer wait raises ``_Busy``; a cancel during the wait, ``_Stopped``. Other
        answers are the caller's ``ApiException``."""
        from kubernetes.client.exceptions import ApiException

        deadline = time.monotonic() + self._timeout
        for _ in range(MAX_RETRY_AFTERS):
            try:
                return fn(*args, _request_timeout=self._timeout, **kw)
            except ApiException as e:
                wait = retry_after_s(e) if e.status in (429, 503) else None
                if wait is None:
                    raise
                left = deadline - time.monotonic()
                if wait > left:  # past what this call may wait: the worker's next pass is the retry
                    raise _Busy(
                        step,
                        f"{what}: the API server asks to wait {wait:g} s (HTTP {e.status}, Retry-After), more than the "
                        f"{max(left, 0):.1f} s left of request_timeout_s ({self._timeout:g} s); tried again later",
                        wait,
                    ) from None
                self._wait(wait)
                if self._stop():
                    raise _Stopped(step) from None
        raise _Busy(
            step,
            f"{what}: the API server still asks to wait after {MAX_RETRY_AFTERS} tries (HTTP 429/503, Retry-After); "
            "tried again later",
        )

    def _node_error(self, result: DrainResult, step: str, node: str, e: ApiException) -> bool:
        outcome = Outcome.NOT_FOUND if e.status == 404 else Outcome.ERROR
        self._record(result, step, node, outcome, f"{step} {node} failed: HTTP {e.status} {e.reason}", status=e.status)
        result.failed = True
        return False

    def _pods_to_evict(self, node: str, result: DrainResult) -> list[tuple[str, str, Any]] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            # in pages, each pod read on its own: one the client's models refuse is left out (audited below), where it
            # failed the list and with it the whole drain
            pods = self._call(
                "list_pods",
                f"list the pods of node {node}",
                partial(list_pages, self._core.list_pod_for_all_namespaces, read=_read_pod, kind="PodList"),
                field_selector=f"spec.nodeName={node}",
            ).items
        except ApiException as e:
            self._record(result, "list_pods", node, Outcome.ERROR, f"listing pods failed: HTTP {e.status}")
            result.failed = True
            return None
        out: list[tuple[str, str, Any]] = []
        for pod in pods:
            if isinstance(pod, _Unread):
                words = f"the client cannot read pod {pod.ref} ({pod.why}); not evicted"
                log.warning("drain of %s: %s", node, words)
                self._record(result, "evict", pod.ref, Outcome.SKIPPED, words)
                continue
            meta = pod.metadata
            if meta is None or not meta.name:
                continue  # the API server never sends a pod without a name; nothing could be evicted anyway
            namespace = meta.namespace or "default"
            ref = f"{namespace}/{meta.name}"
            skip = _skip_reason(pod)
            if skip:
                self._record(result, "evict", ref, Outcome.SKIPPED, skip)
            elif not _has_controller(pod):
                self._record(result, "evict", ref, Outcome.BLOCKED, _NO_CONTROLLER.format(ref=ref, node=node))
                result.blocked.append(ref)
            else:
                out.append((namespace, meta.name, pod))
        if result.blocked:  # as kubectl drain: an unmanaged pod refuses the whole drain, before any eviction
            why = f"drain of {node} blocked by {len(result.blocked)} pod(s) with no controller; no pod evicted"
            self._record(result, "evict", node, Outcome.SKIPPED, why)
            return None
        return out

    def _last_ready_replicas(
        self, node: str, pods: list[tuple[str, str, Any]], result: DrainResult
    ) -> dict[str, str] | None:
        """The ready pods whose eviction would leave their workload no ready replica, read from the API server now,
        with why. A workload is the controller whose ``status.readyReplicas`` counts the pod: a Deployment (Pod ->
        ReplicaSet -> Deployment), a ReplicaSet no Deployment owns, or a StatefulSet (Pod -> StatefulSet). The drain
        rails decided on a snapshot that may be old, and with sharding holds only the instance's own deployments:
        this sees every workload. An owner that is gone (404) counts for nothing; another failed read ends the drain
        failed before any eviction (None). Pods of other controllers (a Job, a custom resource) are not checked."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        apps = client.AppsV1Api(self._core.api_client)
        reads = {
            "deployment": apps.read_namespaced_deployment,
            "replicaset": apps.read_namespaced_replica_set,
            "statefulset": apps.read_namespaced_stateful_set,
        }
        objects: dict[tuple[str, str, str], Any] = {}  # (kind, namespace, name) -> as read now (None: gone)

        def read(kind: str, namespace: str, name: str) -> Any:
            if (kind, namespace, name) not in objects:
                what = f"read {kind} {namespace}/{name}"
                objects[kind, namespace, name] = self._get("evict", what, reads[kind], name, namespace)
            return objects[kind, namespace, name]

        members: dict[tuple[str, str, str], list[str]] = {}  # workload -> its ready pods on this node
        try:
            for namespace, name, pod in pods:
                if not _ready(pod):
                    continue
                workload: tuple[str, str, str] | None = None
                if (rs := _controller_name(pod.metadata, "ReplicaSet")) is not None:
                    got = read("replicaset", namespace, rs)
                    deployment = None if got is None else _controller_name(got.metadata, "Deployment")
                    workload = ("deployment", namespace, deployment) if deployment else ("replicaset", namespace, rs)
                elif (sts := _controller_name(pod.metadata, "StatefulSet")) is not None:
                    workload = ("statefulset", namespace, sts)
                if workload is not None:
                    members.setdefault(workload, []).append(f"{namespace}/{name}")
            refused: dict[str, str] = {}
            for (kind, namespace, owner), refs in members.items():
                got = read(kind, namespace, owner)
                if got is None:
                    continue
                ready = int((got.status.ready_replicas if got.status is not None else None) or 0)
                if ready <= len(refs):
                    words = _last_replica_words(node, f"{kind} {namespace}/{owner}", ready, len(refs))
                    refused.update(dict.fromkeys(refs, words))
        except ApiException as e:
            self._record(
                result,
                "evict",
                node,
                Outcome.ERROR,
                f"reading the owners of {node}'s pods failed: HTTP {e.status} {e.reason} (kvpilot needs get on "
                "apps replicasets, deployments and statefulsets); no pod evicted",
                status=e.status,
            )
            result.failed = True
            return None
        return refused

    def _get(self, step: str, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """A read through ``_call``; None when the object is gone (404)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._call(step, what, fn, *args)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _evict(self, node: str, namespace: str, name: str, result: DrainResult, stop: Callable[[], bool]) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ref = f"{namespace}/{name}"
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        if result.dry_run:
            self._record(result, "evict", ref, Outcome.DRY_RUN, self._dry_run_eviction(namespace, name, body))
            return
        start = self._clock.monotonic()  # the deadline is a duration: a step of the wall clock must not move it
        attempt = 0
        refusals = {"pdb": 0, "throttled": 0}  # a PodDisruptionBudget's 429s; the API server's load shedding's
        while True:
            if self._on_evict is not None:  # before the request: the pod may leave discovery before it returns
                self._on_evict(ref, self._clock.now())
            try:
                self._core.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=self._timeout)
            except ApiException as e:
                if e.status == 404:
                    self._record(result, "evict", ref, Outcome.NOT_FOUND, f"{ref} already gone")
                    return
                if e.status == 429:
                    budget = budget_refusal(e)
                    kind = "pdb" if budget is not None else "throttled"
                    refusals[kind] += 1
                    waited = self._clock.monotonic() - start
                    if waited >= self._backoff.deadline_s:
                        self._record(result, "evict", ref, Outcome.BLOCKED, _blocked_words(ref, waited, refusals))
                        result.blocked.append(ref)
                        return
                    # at least what the API server asks (Retry-After: API Priority and Fairness shedding load), and
                    # never past the deadline by more than the next try
                    asked = retry_after_s(e) or 0.0
                    delay = min(max(self._backoff.delay(attempt), asked), max(self._backoff.deadline_s - waited, 0.0))
                    if refusals[kind] == 1:  # one step per kind of refusal, not one per try: the outcome says how many
                        if budget is not None:
                            said = f"PDB refused {ref} ({budget})" if budget else f"PDB refused {ref}"
                        else:
                            said = (
                                f"the API server throttled the eviction of {ref} (HTTP 429 naming no disruption "
                                "budget: API Priority and Fairness shedding load)"
                            )
                        self._record(
                            result, "evict", ref, Outcome.RETRY,
                            f"{said}; retry in {delay:g} s, backing off to {self._backoff.max_s:g} s, "
                            f"for up to {self._backoff.deadline_s:g} s",
                        )  # fmt: skip
                    self._wait(delay)
                    if stop():
                        self._cancel(result, 1)
                        return
                    attempt += 1
                    continue
                self._record(result, "evict", ref, Outcome.ERROR, f"evicting {ref}: HTTP {e.status} {e.reason}")
                result.failed = True
                return
            after = _refusal_words(refusals)
            after = f" after {after} over {self._clock.monotonic() - start:.0f} s" if after else ""
            self._record(result, "evict", ref, Outcome.OK, f"evicted {ref}{after}")
            result.evicted.append(ref)
            return

    def _dry_run_eviction(self, namespace: str, name: str, body: Any) -> str:
        """What a dry run says of one eviction: the API server is asked it as a dry run (``dryRun=All``, as ``kubectl
        drain --dry-run=server`` asks it), which checks the pod's PodDisruptionBudget and evicts nothing. Before, a dry
        run said "would evict" of a pod its budget refused, and the real drain then waited 600 s on it and failed."""
        from kubernetes.client.exceptions import ApiException

        ref = f"{namespace}/{name}"
        try:
            evict = self._core.create_namespaced_pod_eviction
            evict(name, namespace, body, dry_run="All", _request_timeout=self._timeout)
        except ApiException as e:
            budget = budget_refusal(e) if e.status == 429 else None
            if budget is not None:
                said = f" ({budget})" if budget else ""
                return (
                    f"would wait to evict {ref}: its PodDisruptionBudget refuses it now{said}; a real drain retries it "
                    f"for up to {self._backoff.deadline_s:g} s, then leaves it"
                )
            if e.status == 404:
                return f"{ref} already gone"
            return f"would evict {ref} (the API server's dry run answered HTTP {e.status} {e.reason})"
        except Exception as e:  # no answer in time, a connection refused: a dry run says so and goes on
            return f"would evict {ref} (the API server's dry run got no answer: {type(e).__name__})"
        return f"would evict {ref}"


def _refusal_words(refusals: dict[str, int]) -> str:
    """How many refusals of each kind ("3 PDB refusal(s)", the throttled answers), or "" when there were none."""
    words = [f"{refusals['pdb']} PDB refusal(s)"] if refusals["pdb"] else []
    if refusals["throttled"]:
        words.append(f"{refusals['throttled']} throttled answer(s) (HTTP 429, no disruption budget named)")
    return " and ".join(words)


def _blocked_words(ref: str, waited: float, refusals: dict[str, int]) -> str:
    if refusals["pdb"]:
        return f"PodDisruptionBudget blocked {ref} for {waited:.0f} s ({_refusal_words(refusals)})"
    return (
        f"the API server throttled the eviction of {ref} for {waited:.0f} s ({_refusal_words(refusals)}); no "
        "PodDisruptionBudget refused it"
    )


@dataclass(frozen=True)
class _Unread:
    """A listed pod the client's models refuse (``ref`` namespace/name as sent, ``why`` their words)."""

    ref: str
    why: str


def _read_pod(raw: Any) -> Any:
    from kubernetes.client import V1Pod

    got, why = read_model(V1Pod, raw)
    return _Unread(ref(raw), why) if why else got


class _Busy(Exception):
    def __init__(self, step: str, words: str, wait: float | None = None) -> None:
        super().__init__(words)
        self.step, self.words, self.wait = step, words, wait


class _Stopped(Exception):
    def __init__(self, step: str) -> None:
        super().__init__(step)
        self.step = step


_NO_CONTROLLER = (
    "{ref} has no controller: nothing would recreate it, so an eviction would delete it for good (kubectl drain "
    "refuses it without --force); the node stays cordoned: move or delete the pod, then drain {node} again"
)


def _has_controller(pod: Any) -> bool:
    """A pod some controller recreates elsewhere once evicted. kubectl asks for an owner reference marked
    ``controller: true``; one that leaves ``controller`` unset is counted as a controller here too (objects written
    by hand or by older tools often omit it); no owner reference, or only ``controller: false`` ones, is none."""
    return any(o.controller is not False for o in (pod.metadata.owner_references or []))


def _last_replica_words(node: str, workload: str, ready: int, here: int) -> str:
    return (
        f"{workload} has {ready} ready replica(s), {here} of them on {node}: evicting would leave it "
        "none ready; kept until another replica is ready elsewhere (the API server's status, read now)"
    )


def _controller_name(meta: Any, kind: str) -> str | None:
    """The name of ``meta``'s controller of ``kind`` (``controller`` unset counts, as in ``_has_controller``)."""
    for o in (meta.owner_references if meta is not None else None) or []:
        if o.kind == kind and o.controller is not False and o.name:
            return str(o.name)
    return None


def _ready(pod: Any) -> bool:
    """Running, Ready and not terminating: what a Deployment's ``readyReplicas`` counts."""
    if pod.metadata.deletion_timestamp is not None or pod.status is None or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _skip_reason(pod: Any) -> str | None:
    """Pods a drain leaves alone, as `kubectl drain --ignore-daemonsets` does."""
    annotations = pod.metadata.annotations or {}
    if MIRROR_ANNOTATION in annotations:
        return "mirror (static) pod: managed by the kubelet"
    if any(o.kind == "DaemonSet" for o in (pod.metadata.owner_references or [])):
        return "DaemonSet pod: it would be recreated on the same node"
    if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
        return f"pod already {pod.status.phase.lower()}"
    return None
