"""Where the control loop's targets come from, one backend per discovery kind, registered in ``DISCOVERY``.

Every kind also serves the static targets an operator adds through the API. ``simulator`` (the built-in fake
fleet, for the zero-config start) lives here; the file, Kubernetes and PromQL sources come from
``collector.discovery`` (imported on demand, so the static path never imports the Kubernetes client).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from collector.samples import TargetInfo
from kvpilot.runtime.targets import StaticTargets
from kvpilot.settings import DiscoverySettings, Settings, SettingsError, StaticTarget
from store.fields import TargetSpec, redact_url

log = logging.getLogger(__name__)


def _target(t: StaticTarget) -> TargetInfo:
    return TargetInfo(**t.model_dump())


class _Merged:
    """Discovered targets plus the static ones an operator added through the API."""

    def __init__(self, discovered: Callable[[], Any], static: StaticTargets) -> None:
        self._discovered = discovered
        self._static = static

    async def targets(self) -> list[TargetInfo]:
        found = await self._discovered()
        urls = {t.url for t in found}
        return [*found, *(t for t in self._static.static_targets() if t.url not in urls)]


class SimulatorTargets:
    """Targets as the live simulator lists them at ``/targets`` (its dcgm pages are kind "gpu" here). Replicas it
    lists as not ready (loading weights, draining) are left out, as Kubernetes discovery leaves out pods that are
    not Ready: a replica in its cold start is not a target that is down."""

    def __init__(self, base_url: str, *, timeout_s: float = 2.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)

    async def targets(self) -> list[TargetInfo]:
        r = await self._client.get(f"{self.base_url}/targets")
        r.raise_for_status()
        return [
            TargetInfo(
                url=t["url"],
                kind="gpu" if t["kind"] in ("gpu", "dcgm") else "engine",
                engine=t.get("engine") or None,
                namespace=t.get("namespace") or "default",
                deployment=t.get("deployment", ""),
                pod=t.get("pod", ""),
                node=t.get("node", ""),
                role=t.get("role") or None,
            )
            for t in r.json()
            if t.get("ready", True)
        ]

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass
class Sources(AbstractContextManager["Sources"]):
    """What ``build`` returns: the loop's discovery, the API's static registry, and what to close at exit."""

    discovery: Any
    static: StaticTargets
    resources: ExitStack = field(default_factory=ExitStack)
    simulator_url: str | None = None
    collector: Any = None  # a source that replaces scraping (promql), else None: the scraping Collector
    # collector.discovery.static_file's reader (``StaticFileDiscovery``: its kept reads go to /metrics), else None
    targets_file: Any = None

    def __enter__(self) -> Sources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.resources.close()


REPORTED_KEPT = 4096  # refused targets a source says once each (past it, the oldest may be said again)


class _Checked:
    """A discovery source's targets held to the API's and the configuration's rules (``store.fields.TargetSpec``):
    one that breaks them (credentials in the URL, a name Kubernetes would refuse) is left out with an error
    naming it, once, instead of reaching labels and the store. The targets file's, and the pods' (a pod's
    ``kvpilot.io/deployment`` and ``kvpilot.io/path`` annotations are anyone's who may create a pod there). A
    target is checked once, taken or left out: a source that hands the same target objects every tick (Kubernetes
    discovery) costs a lookup each."""

    def __init__(self, source: Any, what: str, *, by_pod: bool = False) -> None:
        self._source = source
        self._what = what
        self._by_pod = by_pod  # a pod's target named by its pod (its URL is its IP), a file's by its URL
        # hashes of the URLs said, the latest REPORTED_KEPT: a pod's URL may run to 256 KiB (its path annotation),
        # and pods created and deleted in turn would keep each whole, for good
        self._reported: dict[int, None] = {}
        self._checked: dict[int, TargetInfo] = {}  # id -> the target checked and taken (held, so ids stay its)
        self._left_out: dict[int, TargetInfo] = {}  # id -> the target checked and left out, alike

    async def __call__(self) -> list[TargetInfo]:
        good: list[TargetInfo] = []
        checked: dict[int, TargetInfo] = {}
        left_out: dict[int, TargetInfo] = {}
        found: list[TargetInfo] = await self._source()
        for t in found:
            if self._checked.get(id(t)) is t:
                good.append(t)
                checked[id(t)] = t
                continue
            if self._left_out.get(id(t)) is t:
                left_out[id(t)] = t
                continue
            try:
                TargetSpec(**{k: getattr(t, k) for k in TargetSpec.model_fields})
            except ValidationError as e:
                left_out[id(t)] = t
                if hash(t.url) not in self._reported:
                    self._reported[hash(t.url)] = None
                    if len(self._reported) > REPORTED_KEPT:
                        del self._reported[next(iter(self._reported))]
                    why = "; ".join(err["msg"].removeprefix("Value error, ")[:200] for err in e.errors())
                    name = f"pod {t.namespace}/{t.pod}" if self._by_pod else f"target {redact_url(t.url)[:200]}"
                    log.error("%s: %s left out: %s", self._what, name, why)
                continue
            good.append(t)
            checked[id(t)] = t
        self._checked, self._left_out = checked, left_out
        return good


def _static(settings: Settings) -> Sources:
    d = settings.collector.discovery
    static = StaticTargets([_target(t) for t in d.static_targets])
    if d.static_file is None:
        return Sources(discovery=static, static=static)
    file = _collector_source("static", settings)
    return Sources(_Merged(_Checked(file.targets, "targets file"), static), static, targets_file=file)


@dataclass
class EmbeddedSimulator(AbstractContextManager["EmbeddedSimulator"]):
    """The built-in fake fleet on a loopback port: what `kvpilot run` scrapes when given no configuration."""

    replicas: int
    trace: str = "synthetic"
    url: str = ""
    _server: Any = None
    _live: Any = None

    def __enter__(self) -> EmbeddedSimulator:
        import threading

        from simulator import PROFILES, Fleet, FleetConfig, load_trace
        from simulator.server import LiveFleet, make_server

        fleet = Fleet(FleetConfig(profile=PROFILES["llama3-8b-h100"], replicas=self.replicas), load_trace(self.trace))
        self._live = LiveFleet(fleet)
        self._server = make_server(self._live, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._live.start()
        threading.Thread(target=self._server.serve_forever, name="simulator-http", daemon=True).start()
        log.info("embedded simulator with %d replicas serving on %s", self.replicas, self.url)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._live.stop()


def _simulator(settings: Settings) -> Sources:
    d = settings.collector.discovery
    sim = EmbeddedSimulator(d.simulator_replicas, str(d.simulator_trace) if d.simulator_trace else "synthetic")
    stack = ExitStack()
    stack.enter_context(sim)
    static = StaticTargets([_target(t) for t in d.static_targets])
    return Sources(_Merged(SimulatorTargets(sim.url).targets, static), static, stack, simulator_url=sim.url)


def _collector_source(kind: str, settings: Settings) -> Any:
    """A discovery source from ``collector.discovery`` (imported on demand), errors turned into SettingsError."""
    from collector.discovery import SOURCES

    try:
        module = importlib.import_module(SOURCES[kind])
    except ModuleNotFoundError:
        raise SettingsError(f"collector.discovery.kind: {kind!r} discovery is not available in this build") from None
    try:
        return module.from_settings(settings.collector.discovery)
    except ValueError as e:
        raise SettingsError(f"collector.discovery ({kind}): {e}") from None


def _kubernetes(settings: Settings) -> Sources:
    discovery = _collector_source("kubernetes", settings)
    static = StaticTargets([_target(t) for t in settings.collector.discovery.static_targets])
    return Sources(_Merged(_Checked(discovery.targets, "kubernetes discovery", by_pod=True), static), static)


def _promql(settings: Settings) -> Sources:
    """Prometheus already scrapes the fleet: its query API replaces the collect stage, not just discovery."""
    from collector.discovery import promql

    kv = settings.detectors.thresholds(tick_s=settings.collector.interval_s).kv
    try:
        source = promql.from_settings(settings.collector.discovery, settings.collector, kv_from=kv.project_from_usage)
    except ValueError as e:
        raise SettingsError(f"collector.discovery (promql): {e}") from None
    return Sources(discovery=source, static=StaticTargets(), collector=source)


DISCOVERY: dict[str, Callable[[Settings], Sources]] = {
    "static": _static,
    "simulator": _simulator,
    "kubernetes": _kubernetes,
    "promql": _promql,
}


def build(settings: Settings) -> Sources:
    kind: str = settings.collector.discovery.kind
    return DISCOVERY[kind](settings)


__all__ = ["DISCOVERY", "DiscoverySettings", "EmbeddedSimulator", "SimulatorTargets", "Sources", "build"]
