"""Targets from Kubernetes pods: label selector plus ``kvpilot.io/*`` annotations, kept current by list+watch.

The official client is synchronous, so one daemon thread lists the pods (in pages of 500, as client-go's pager:
``collector.discovery.pager``), then watches from the list's
resourceVersion; a watch that ends (``timeoutSeconds``) resumes from the last version seen, and a watch
answered ``410 Gone`` (the version was compacted away) starts over with a fresh list. The scrape loop
only reads a snapshot, so a slow or failing API server never blocks a tick. See
docs/configuration-targets.md for the annotations.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from collector.discovery import DiscoveryUnavailable
from collector.discovery.kube_retries import once_on_a_closed_connection
from collector.discovery.pager import PAGE_SIZE, list_pages
from collector.engines import ENGINES
from collector.roles import role_from_pod
from collector.samples import TargetInfo

log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "kvpilot.io/"
DEFAULT_SELECTOR = "kvpilot.io/scrape=true"
KINDS = ("engine", "gpu")
# GPU feature discovery labels each GPU node with its product, the NVML name with spaces as hyphens
# ("NVIDIA-H100-80GB-HBM3"): the resource name `nvidia.com/gpu` plus ".product" (NVIDIA/gpu-feature-discovery,
# internal/lm/resource.go @ 1b5b104afe2a8852b5495dc2f933afaadd21b1a5, newProductLabeler). Pods pick a GPU type by it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
# A watch that ends sooner than this is followed by retry_delay_s before the next (client-go's reflector backs off
# after a "very short watch" too).
MIN_WATCH_S = 1.0
# While the API server keeps failing the same way (a wrong kubeconfig server, the API down), the failure is logged
# once and then once a minute with its count, not at every retry_delay_s (was a warning every 2 s, each after three of
# urllib3's "Retrying" warnings).
REPEAT_LOG_S = 60.0


def _ready(pod: Any) -> bool:
    status = pod.status
    if status is None or status.phase != "Running" or not status.pod_ip:
        return False
    if pod.metadata is None or pod.spec is None:  # not from a real API server, whose pods always have both
        return False
    if pod.metadata.deletion_timestamp is not None:
        return False  # terminating: it is about to stop answering
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())


def _first_container_port(pod: Any) -> int | None:
    for container in pod.spec.containers or ():
        for port in container.ports or ():
            if port.container_port:
                return int(port.container_port)
    return None


def _deployment(pod: Any, annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    explicit = annotations.get(ANNOTATION_PREFIX + "deployment")
    if explicit:
        return explicit
    template_hash = labels.get("pod-template-hash")
    for owner in pod.metadata.owner_references or ():
        if owner.kind == "ReplicaSet" and template_hash and owner.name.endswith("-" + template_hash):
            return str(owner.name[: -len(template_hash) - 1])  # the Deployment that owns the ReplicaSet
        if owner.kind in ("StatefulSet", "ReplicaSet", "LeaderWorkerSet"):
            return str(owner.name)
    return labels.get("app.kubernetes.io/name") or labels.get("app") or str(pod.metadata.name)


def _gpu_request(pod: Any) -> tuple[str, int]:
    """(the GPU product the pod selects nodes by, the GPUs its containers' limits add up to): from its nodeSelector,
    else a required node-affinity term naming exactly one product; ("", 0) for what it does not say."""
    spec = pod.spec
    product = (spec.node_selector or {}).get(GPU_PRODUCT_LABEL, "")
    affinity = spec.affinity.node_affinity if spec.affinity is not None else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity is not None else None
    if not product and required is not None:
        for term in required.node_selector_terms or ():
            for expr in term.match_expressions or ():
                if expr.key == GPU_PRODUCT_LABEL and expr.operator == "In" and len(expr.values or ()) == 1:
                    product = expr.values[0]
    gpus = 0
    for container in spec.containers or ():
        limits = container.resources.limits if container.resources is not None else None
        value = str((limits or {}).get(GPU_RESOURCE, "0")).strip()
        gpus += int(value) if value.isascii() and value.isdigit() else 0
    return str(product), gpus


def _checked_target(pod: Any) -> TargetInfo | None:
    """`pod_target`, an object it cannot read (a field no check foresaw) left out with a warning: one pod, not the
    whole list or watch, which failed again on it at every relist."""
    try:
        return pod_target(pod)
    except Exception as e:
        meta = getattr(pod, "metadata", None)
        log.warning("pod %s/%s: %s: %s; not scraping it", getattr(meta, "namespace", None),
                    getattr(meta, "name", None), type(e).__name__, e)  # fmt: skip
        return None


def _metadata(raw: Any) -> dict[str, Any]:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    return meta if isinstance(meta, dict) else {}


def _pod_key(raw: Any) -> tuple[str, str]:
    meta = _metadata(raw)
    return str(meta.get("namespace")), str(meta.get("name"))


def _read_pod(raw: Any) -> tuple[tuple[str, str], TargetInfo | None]:
    """(namespace, name) of a pod as the API server sent it (JSON), and its target: each pod read into the client's
    model on its own, one it refuses left out with a warning. Before, the client read the whole list (or event) into
    its models, which refuse an object missing a field they require (a container port named but not numbered, a
    container with no name, an annotation that is not a string: what a real API server refuses to store, but a proxy
    or another server may send): one such pod failed every list and watch, for good, blind to all the others."""
    from kubernetes.client import V1Pod

    key = _pod_key(raw)
    try:
        pod = V1Pod.from_dict(raw)
    except Exception as e:
        why = " ".join(str(e).split())[:300]
        log.warning("pod %s/%s: the client cannot read it (%s: %s); not scraping it", *key, type(e).__name__, why)
        return key, None
    return key, _checked_target(pod)


def pod_target(pod: Any) -> TargetInfo | None:
    """The target a pod (a ``V1Pod``) describes, or None when it should not be scraped now (not Running
    and Ready, no IP, no port, or an annotation kvpilot cannot honour: logged, not guessed)."""
    if not _ready(pod):
        return None
    meta = pod.metadata
    annotations: Mapping[str, str] = meta.annotations or {}
    labels: Mapping[str, str] = meta.labels or {}
    where = f"pod {meta.namespace}/{meta.name}"
    raw_port = annotations.get(ANNOTATION_PREFIX + "port")
    if raw_port is not None:
        # ASCII only: '²'.isdigit() is True and int('²') a ValueError, which ended every list and watch for good
        if not (raw_port.isascii() and raw_port.isdigit()) or not 0 < int(raw_port) < 65536:
            log.warning("%s: annotation %sport=%r is not a port; not scraping it", where, ANNOTATION_PREFIX, raw_port)
            return None
        port: int | None = int(raw_port)
    else:
        port = _first_container_port(pod)
    if port is None:
        log.warning("%s: no %sport annotation and no container port; not scraping it", where, ANNOTATION_PREFIX)
        return None
    kind = annotations.get(ANNOTATION_PREFIX + "kind", "engine")
    if kind not in KINDS:
        log.warning("%s: annotation %skind=%r is not one of %s; not scraping it", where, ANNOTATION_PREFIX, kind, KINDS)
        return None
    engine = annotations.get(ANNOTATION_PREFIX + "engine") or None
    if engine is not None and kind == "engine":
        # `vLLM` is what people type: read as the adapter's name; a name no adapter has would only leave it down
        engine = engine.strip().lower()
        if engine not in ENGINES:
            log.warning("%s: annotation %sengine=%r is not one of %s (or leave it out); not scraping it", where,
                        ANNOTATION_PREFIX, annotations[ANNOTATION_PREFIX + "engine"], ", ".join(ENGINES))  # fmt: skip
            return None
    scheme = annotations.get(ANNOTATION_PREFIX + "scheme", "http")
    if scheme not in ("http", "https"):
        log.warning(
            "%s: annotation %sscheme=%r is not http or https; not scraping it", where, ANNOTATION_PREFIX, scheme
        )
        return None
    try:
        role = role_from_pod(labels, annotations)
    except ValueError as e:
        log.warning("%s: %s; not scraping it", where, e)
        return None
    path = annotations.get(ANNOTATION_PREFIX + "path", "/metrics")
    if not path.startswith("/"):
        path = "/" + path
    ip = str(pod.status.pod_ip)
    try:
        ipaddress.ip_address(ip)
    except ValueError:  # a real API server refuses it; in a URL its "/" or ":" would pick another host, port or path
        log.warning("%s: status.podIP %r is not an IP address; not scraping it", where, ip[:100])
        return None
    gpu_product, gpus = _gpu_request(pod)
    host = f"[{ip}]" if ":" in ip else ip
    return TargetInfo(
        url=f"{scheme}://{host}:{port}{path}",
        kind=kind,
        engine=engine,
        # absent: found on the page; "" (annotation present, empty): no prefix, no search
        prefix=annotations.get(ANNOTATION_PREFIX + "prefix"),
        namespace=str(meta.namespace or "default"),
        deployment=_deployment(pod, annotations, labels),
        pod=str(meta.name),
        node=str(pod.spec.node_name or ""),
        role=role,
        gpu_product=gpu_product,
        gpus=gpus,
    )


class KubernetesDiscovery:
    """`Discovery` over pods, kept current by a list+watch thread started on first use."""

    def __init__(
        self,
        api_client: Any,
        *,
        namespace: str | None = None,
        label_selector: str = DEFAULT_SELECTOR,
        watch_timeout_s: int = 300,
        retry_delay_s: float = 2.0,
        page_size: int = PAGE_SIZE,
    ) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout_s = watch_timeout_s
        self.retry_delay_s = retry_delay_s
        self.page_size = page_size  # objects a list request asks for (limit); 0: one unpaged list
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], TargetInfo] = {}  # (namespace, name) -> target
        self._listed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self.lists = 0  # how many full lists (1 + restarts after 410 or errors)
        self.list_requests = 0  # the list requests they took (a page each)
        self.short_watches = 0  # watches that ended within MIN_WATCH_S (each followed by retry_delay_s)
        self.last_error: str | None = None
        self.failures = 0  # failed tries since the last list that worked
        self._logged: tuple[str, float] | None = None  # the failure last logged, and when (monotonic)

    # -- the loop's interface -------------------------------------------------------------------------

    async def targets(self) -> list[TargetInfo]:
        """The current pods' targets. The first call waits (off the event loop) for the first list."""
        self.start()
        if not self._listed.is_set():
            await asyncio.to_thread(self._listed.wait, 30)
            if not self._listed.is_set():
                why = self.last_error or "still waiting"
                raise DiscoveryUnavailable(f"kubernetes discovery: no pod list yet ({why})")
        return self.snapshot()

    def snapshot(self) -> list[TargetInfo]:
        with self._lock:
            return sorted(self._pods.values(), key=lambda t: (t.namespace, t.pod))

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvpilot.discovery.kubernetes", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- list + watch -----------------------------------------------------------------------------------

    def _list_call(self) -> tuple[Callable[..., Any], tuple[str, ...]]:
        # The bound API method itself (not a wrapper): Watch reads its docstring to deserialise V1Pods.
        if self.namespace:
            return self._core.list_namespaced_pod, (self.namespace,)
        return self._core.list_pod_for_all_namespaces, ()

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                started = time.monotonic()
                resource_version = self._watch_from(resource_version)
                if time.monotonic() - started < MIN_WATCH_S:
                    # a server or proxy that ends each watch at once: paced, not opened again 20 times a second
                    self.short_watches += 1
                    self._stop.wait(self.retry_delay_s)
            except ApiException as e:
                if e.status == 410:
                    log.info("pod watch expired (410 Gone); listing again")
                    resource_version = None
                    continue
                self._failed(f"API error {e.status}: {e.reason}")
                resource_version = None
            except Exception as e:  # the API server is unreachable, a response was garbled, ...
                self._failed(self._unreachable(e) or f"{type(e).__name__}: {e}")
                resource_version = None

    def _unreachable(self, e: Exception) -> str | None:
        """One line for an API server that does not answer (urllib3's MaxRetryError: a URL and a repr 400 long)."""
        from urllib3.exceptions import MaxRetryError

        if not isinstance(e, MaxRetryError) or e.reason is None:
            return None
        reason = str(e.reason)
        _, found, why = reason.partition("): ")  # "HTTPSConnection(host='h', port=1): Failed to establish ..."
        host = self._core.api_client.configuration.host
        return f"the Kubernetes API at {host} does not answer: {why if found else reason}"

    def _failed(self, error: str) -> None:
        self.last_error = error
        self.failures += 1
        now = time.monotonic()
        if self._logged is None or self._logged[0] != error or now - self._logged[1] >= REPEAT_LOG_S:
            self._logged = (error, now)
            again = f"; {self.failures} failed tries so far" if self.failures > 1 else ""
            log.warning(
                "pod discovery failed (%s); keeping %d known targets, retrying every %g s%s (check the kubeconfig's "
                "server, or the API server from this pod)", error, len(self._pods), self.retry_delay_s, again,
            )  # fmt: skip
        self._stop.wait(self.retry_delay_s)

    def _relist(self) -> str:
        call, args = self._list_call()
        # in pages of `page_size` (limit + continue, as client-go's pager), each pod read on its own (`_read_pod`): one
        # the client's models refuse is left out; an expired continue token is followed by one full list
        listed = list_pages(
            call, *args, read=_read_pod, kind="PodList", page_size=self.page_size,
            label_selector=self.label_selector, _request_timeout=30,
        )  # fmt: skip
        fresh = {key: target for key, target in listed.items if target is not None}
        with self._lock:
            self._pods = fresh
        self.lists += 1
        self.list_requests += listed.requests
        if self.failures:
            log.info("pod discovery works again after %d failed tries: %d pods listed", self.failures, len(fresh))
        self.failures = 0
        self._logged = None
        self.last_error = None
        self._listed.set()
        return listed.resource_version

    def _watch_from(self, resource_version: str) -> str:
        from kubernetes import watch

        # "object": each event's pod as JSON (a dict), read by `_read_pod`, as the list's are
        w: Any = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        self._watch = w
        call, args = self._list_call()
        for event in w.stream(
            call,
            *args,
            label_selector=self.label_selector,
            resource_version=resource_version,
            timeout_seconds=self.watch_timeout_s,
            _request_timeout=self.watch_timeout_s + 30,
        ):
            if self._stop.is_set():
                w.stop()
                break
            raw = event["object"]
            resource_version = str(_metadata(raw).get("resourceVersion"))
            if event["type"] == "BOOKMARK":  # not asked for; it carries only a resourceVersion
                continue
            key, target = (_pod_key(raw), None) if event["type"] == "DELETED" else _read_pod(raw)
            with self._lock:
                if target is None:
                    self._pods.pop(key, None)
                else:
                    self._pods[key] = target
        return resource_version


def from_settings(settings: Any) -> KubernetesDiscovery:
    """Build from ``collector.discovery`` settings: in-cluster config, else the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as e:  # none, or one without a context: was a traceback, exit 1
            raise ValueError(f"not in a cluster and no usable kubeconfig: {e}") from None
    configuration = client.Configuration.get_default_copy()
    # Discovery retries every retry_delay_s itself (urllib3's default three retries logged three warnings before each
    # failure, every 2 s while the API was away); inside urllib3 only a GET whose pooled connection the server had
    # closed is sent once more, on another connection (``collector.discovery.kube_retries``)
    configuration.retries = once_on_a_closed_connection()
    return KubernetesDiscovery(
        client.ApiClient(configuration),
        namespace=getattr(settings, "kubernetes_namespace", None),
        label_selector=getattr(settings, "kubernetes_label_selector", DEFAULT_SELECTOR),
    )
