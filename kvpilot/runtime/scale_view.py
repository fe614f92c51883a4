"""How many replicas each deployment is asked to run, as the scale subresource says, including zero.

The collector only sees replicas that serve metrics, so a deployment scaled to zero (or loading its first
replicas after scale-from-zero) has no replicas in ``FleetState``. The control loop asks a ``ScaleSource`` every
tick instead, so that such a deployment keeps getting decisions (KEDA's answer stays fresh, and a forecast burst
can wake it), and so that a deployment that was deleted is told apart from one at zero and forgotten.

A source answers only for the deployments it is authoritative for: Kubernetes for the namespaces it could list,
kube-state-metrics (through Prometheus, in PromQL mode) for the Deployments it exports, the simulator for its one
deployment. It never drops a deployment it could not check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import httpx

from collector.discovery.pager import list_pages, read_model, ref
from kvpilot.runtime.stopping import in_daemon_thread
from scaler.rollout import DeploymentRollout, resolve_int_or_percent

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScaleView:
    replicas: Mapping[str, int] = field(default_factory=dict)  # "namespace/name" -> spec.replicas (0 included)
    gone: frozenset[str] = frozenset()  # deployments asked about that no longer exist
    arrival_rates: Mapping[str, float] = field(default_factory=dict)  # requests/s at the gateway, where there is one
    # Deployment rollout status (Kubernetes, kube-state-metrics)
    rollouts: Mapping[str, DeploymentRollout] = field(default_factory=dict)


class ScaleSource(Protocol):
    async def read(self, known: Collection[str], now: float) -> ScaleView:
        """Replica counts of `known` deployments (and of any the source itself manages), and which are gone."""
        ...


class SimulatorScale:
    """The simulator's control API stands in for ``deployments/scale`` (its one deployment): replica counts only.
    `kvpilot run` against the simulator reads arrivals as it does on a cluster: the engines' estimate in
    ``FleetState``, or a gateway's counter through PromQL where ``collector.arrivals`` names one
    (``kvpilot.runtime.arrivals``, a stage of its own, not a scale source's), as `kvpilot demo --arrivals gateway`
    reads the simulated router's. Before session 29 this source handed the planner the router's exact count as a
    30 s rate, a path no deployment has."""

    def __init__(self, base_url: str, *, timeout_s: float = 2.0) -> None:
        self._url = base_url.rstrip("/") + "/control/state"
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        r = await self._client.get(self._url)
        r.raise_for_status()
        state = r.json()
        key = f"{state.get('namespace', 'inference')}/{state.get('deployment', 'llama')}"
        # spec.replicas: every replica not on its way out (loading ones count, as a scaled-up Deployment's do)
        count = sum(1 for rep in state["replicas"] if rep["state"] != "draining")
        return ScaleView(replicas={key: count})

    async def aclose(self) -> None:
        await self._client.aclose()


NOT_FOUND_KEPT = 4096  # deployments no source found, said once each (past it, the oldest may be said again)


class SaidOnce:
    """Names said once each, the latest ``NOT_FOUND_KEPT`` kept (by hash): the names asked about include those a
    gateway's counter names (``collector.arrivals``), and a label naming ever new ones (a model name each client makes
    up) grew a set of them by up to 256 a tick, for good."""

    def __init__(self) -> None:
        self._said: dict[int, None] = {}

    def first(self, name: str) -> bool:
        """Whether ``name`` is to be said now: not said, or said before the latest ``NOT_FOUND_KEPT``."""
        key = hash(name)
        if key in self._said:
            return False
        self._said[key] = None
        if len(self._said) > NOT_FOUND_KEPT:
            del self._said[next(iter(self._said))]
        return True


class KubernetesScale:
    """``spec.replicas`` of the known Deployments, one list call per namespace (RBAC: list deployments).

    A deployment this source has listed before and that is now missing was deleted. One it never found (pods
    grouped under a name that is no Deployment: a StatefulSet, a LeaderWorkerSet, an annotation) gets no answer
    at all, so it is decided from its replicas as before rather than forgotten. A namespace that cannot be
    listed (API down, RBAC) answers nothing for its deployments: they keep their last decision until it goes stale.
    """

    def __init__(self, apps: Any, *, timeout_s: float = 5.0) -> None:
        self._apps = apps  # kubernetes.client.AppsV1Api
        self._timeout_s = timeout_s
        self._listed: set[str] = set()  # deployments found as Deployment objects at least once
        self._not_found = SaidOnce()  # never found: logged once
        self._pending: dict[str, asyncio.Future[Any]] = {}  # namespace -> its list, outstanding or last done

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        by_namespace: dict[str, set[str]] = {}
        for key in known:
            namespace, _, name = key.partition("/")
            by_namespace.setdefault(namespace, set()).add(name)
        listed = await self._lists(sorted(by_namespace))
        replicas: dict[str, int] = {}
        rollouts: dict[str, DeploymentRollout] = {}
        gone: set[str] = set()
        for namespace, result in zip(sorted(by_namespace), listed, strict=True):
            if isinstance(result, BaseException):
                log.warning("cannot list deployments in namespace %s: %s", namespace, _reason(result))
                continue
            counts, found_rollouts, unread = result
            for name in by_namespace[namespace]:
                key, count = f"{namespace}/{name}", counts.get(name)
                if name in unread:
                    continue  # listed but unreadable: neither a count nor deleted, it keeps its last decision
                if count is not None:
                    replicas[key] = count
                    self._listed.add(key)
                    if name in found_rollouts:
                        rollouts[key] = found_rollouts[name]
                elif key in self._listed:
                    gone.add(key)
                    self._listed.discard(key)
                elif self._not_found.first(key):
                    log.info("no Deployment %s: its replica count comes from the replicas seen", key)
        return ScaleView(replicas=replicas, gone=frozenset(gone), rollouts=rollouts)

    async def _lists(self, namespaces: list[str]) -> list[Any]:
        """Each namespace's list, or the exception that ended it, within ``timeout_s`` (and a second) in all: the
        client retries a read that timed out three times, so an API server that took the request and never answered
        held the tick's scale stage 4 x ``timeout_s`` (20 s at 5 s ticks: every KEDA answer went stale). A list still
        outstanding is not asked again (one thread of its own, never a shared executor's worker)."""
        loop, asked = asyncio.get_running_loop(), []
        for namespace in namespaces:
            last = self._pending.get(namespace)
            if last is None or last.done() or last.get_loop() is not loop:
                self._pending[namespace] = in_daemon_thread(partial(self._list, namespace), name="kvpilot-scale-list")
                asked.append(self._pending[namespace])
        if asked:
            await asyncio.wait(asked, timeout=self._timeout_s + 1.0)
        late = TimeoutError(f"no answer within {self._timeout_s:g} s")
        lists = [(f.exception() or f.result()) if f.done() else late for f in (self._pending[n] for n in namespaces)]
        # a namespace no longer asked about keeps its list only while it runs (a gateway's label naming ever new
        # namespaces kept one finished list each, for good)
        wanted = set(namespaces)
        for namespace in [n for n, f in self._pending.items() if n not in wanted and f.done()]:
            del self._pending[namespace]
        return lists

    def _list(self, namespace: str) -> tuple[dict[str, int], dict[str, DeploymentRollout], set[str]]:
        """(replicas, rollouts, the names of Deployments the client cannot read) of one namespace, listed in pages
        (``collector.discovery.pager``), each Deployment read on its own: one the client's models refuse (what a real
        API server refuses to store; a proxy or another server may send it) answers nothing for itself alone, where it
        failed the namespace's list, every deployment of it, every tick."""
        from kubernetes.client import V1Deployment

        unread: set[str] = set()

        def read(raw: Any) -> Any:
            got, why = read_model(V1Deployment, raw)
            if why:
                unread.add(ref(raw).partition("/")[2])
                log.warning("deployment %s: the client cannot read it (%s); its replicas are not known", ref(raw), why)
            return got

        items = list_pages(
            self._apps.list_namespaced_deployment, namespace, read=read, kind="DeploymentList",
            _request_timeout=self._timeout_s,
        ).items  # fmt: skip
        # spec.replicas is optional in the API (defaulted to 1 by the apiserver); None never reaches here in practice
        counts: dict[str, int] = {}
        rollouts: dict[str, DeploymentRollout] = {}
        for d in items:
            try:
                counts[d.metadata.name] = int(d.spec.replicas if d.spec.replicas is not None else 1)
            except (AttributeError, TypeError, ValueError):  # no metadata or spec: read, but not a Deployment's
                unread.add(str(getattr(getattr(d, "metadata", None), "name", None)))
                continue
            try:
                rollouts[d.metadata.name] = deployment_rollout(d)
            except (AttributeError, TypeError, ValueError):
                continue  # a partial object (an old apiserver, a test double): no rollout status, counts still serve
        return counts, rollouts, unread


def deployment_rollout(d: Any) -> DeploymentRollout:
    """A Deployment's rollout status (kubernetes.client V1Deployment): generation against observedGeneration, the
    pods on the newest template, and the RollingUpdate strategy's fenceposts (Recreate: the whole set at once)."""
    spec, status = d.spec, d.status
    if status is None or getattr(status, "observed_generation", None) is None:
        raise ValueError("the controller has not reported on this Deployment yet")
    replicas = int(spec.replicas if spec.replicas is not None else 1)
    strategy = getattr(spec, "strategy", None)
    rolling = getattr(strategy, "rolling_update", None)
    if strategy is not None and getattr(strategy, "type", None) == "Recreate":
        surge, unavailable = 0, replicas
    else:
        surge = resolve_int_or_percent(getattr(rolling, "max_surge", None), replicas, round_up=True)
        unavailable = resolve_int_or_percent(getattr(rolling, "max_unavailable", None), replicas, round_up=False)
    return DeploymentRollout(
        generation=int(d.metadata.generation or 0),
        observed_generation=int(getattr(status, "observed_generation", None) or 0),
        replicas=replicas,
        updated_replicas=int(getattr(status, "updated_replicas", None) or 0),
        status_replicas=int(getattr(status, "replicas", None) or 0),
        ready_replicas=int(getattr(status, "ready_replicas", None) or 0),
        max_surge=surge,
        max_unavailable=unavailable,
    )


def _reason(error: BaseException) -> str:
    status, reason = getattr(error, "status", None), getattr(error, "reason", None)
    if status is not None:
        return f"HTTP {status} {reason or ''}".strip()
    return str(error).splitlines()[0] if str(error) else type(error).__name__
