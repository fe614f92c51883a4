"""Replica counts as the scale subresource says, zero included: against the fake Kubernetes API server (real client,
real HTTP) and against the live simulator's control API."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from kvpilot.runtime.scale_view import KubernetesScale, SimulatorScale
from simulator import PROFILES, Fleet, FleetConfig
from simulator.server import LiveFleet, make_server
from simulator.trace import load_trace
from tests.fakekube.scale import deployment
from tests.fakekube.server import FakeKube
from tests.helpers.silent_api import api_answering


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    kube = FakeKube().start()
    try:
        yield kube
    finally:
        kube.stop()


async def test_kubernetes_counts_zero_and_tells_deleted_from_unknown(fake_kube: FakeKube) -> None:
    kube_api_client = fake_kube.api_client()
    fake_kube.create("deployments", deployment("chat", "llm", replicas=0), namespace="llm")
    fake_kube.create("deployments", deployment("code", "llm", replicas=3), namespace="llm")
    fake_kube.create("deployments", deployment("unmanaged", "llm", replicas=9), namespace="llm")
    scale = KubernetesScale(client.AppsV1Api(kube_api_client))
    view = await scale.read(["llm/chat", "llm/code", "llm/sts"], 0.0)
    # zero is a count, not an absence; a deployment kvpilot does not know of is not picked up; a name that is no
    # Deployment (pods of a StatefulSet, say) gets no answer rather than being taken for deleted
    assert dict(view.replicas) == {"llm/chat": 0, "llm/code": 3}
    assert view.gone == frozenset()
    # one list call per namespace, whatever the number of deployments in it
    lists = [path for method, path in fake_kube.requests if method == "GET" and path.endswith("/deployments")]
    assert lists == ["/apis/apps/v1/namespaces/llm/deployments"]
    fake_kube.delete("deployments", "code", namespace="llm")
    view = await scale.read(["llm/chat", "llm/code", "llm/sts"], 5.0)
    assert (dict(view.replicas), view.gone) == ({"llm/chat": 0}, frozenset({"llm/code"}))
    # reported once: a deployment created again later is a new one
    view = await scale.read(["llm/chat", "llm/code"], 10.0)
    kube_api_client.close()
    assert view.gone == frozenset()


async def test_kubernetes_namespace_that_cannot_be_listed_answers_nothing() -> None:
    class Refusing:
        def list_namespaced_deployment(self, namespace: str, **_: object) -> object:
            raise client.ApiException(status=403, reason="Forbidden")

    view = await KubernetesScale(Refusing()).read(["llm/chat"], 0.0)
    # neither a count nor "deleted": the deployment keeps its last decision until it goes stale
    assert (dict(view.replicas), view.gone) == ({}, frozenset())


async def test_an_api_server_that_never_answers_holds_the_tick_at_most_the_timeout(fake_kube: FakeKube) -> None:
    # before: the client retries a read that timed out three times: 4 x timeout_s in the tick's scale stage (20 s
    # at the default 5 s, with 5 s ticks: every KEDA answer went stale), and again at every tick
    fake_kube.create("deployments", deployment("chat", "llm", replicas=2), namespace="llm")

    class TwoServers(client.AppsV1Api):  # namespace "llm" on the fake, "prod" on the server that never answers
        def list_namespaced_deployment(self, namespace: str, **kw: object) -> object:
            return client.AppsV1Api(answering if namespace == "llm" else hung).list_namespaced_deployment(
                namespace, **kw
            )

    with fake_kube.api_client() as answering, api_answering(None) as hung:
        scale = KubernetesScale(TwoServers(), timeout_s=2.0)  # before: 8 s a read
        for tick in range(2):  # the second does not ask again while the first list is still out
            t0 = time.monotonic()
            view = await scale.read(["llm/chat", "prod/x"], float(tick))
            assert time.monotonic() - t0 < (4.5 if tick == 0 else 1.0)
            assert (dict(view.replicas), view.gone) == ({"llm/chat": 2}, frozenset())


@pytest.fixture
def simulator() -> Iterator[tuple[str, LiveFleet]]:
    fleet = Fleet(FleetConfig(profile=PROFILES["llama3-8b-h100"], replicas=2), load_trace("synthetic"))
    live = LiveFleet(fleet, speed=1.0)
    server = make_server(live, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", live
    finally:
        server.shutdown()


async def test_simulator_scale_counts_loading_replicas_and_zero(simulator: tuple[str, LiveFleet]) -> None:
    url, live = simulator
    scale = SimulatorScale(url)
    cfg = live.fleet.config
    key = f"{cfg.namespace}/{cfg.deployment}"
    try:
        assert dict((await scale.read([], 0.0)).replicas) == {key: 2}
        with live.lock:
            live.fleet.set_replicas(5)  # three replicas start loading: they count, as a scaled Deployment's pods do
        assert dict((await scale.read([key], 1.0)).replicas) == {key: 5}
        with live.lock:
            live.fleet.set_replicas(0)  # draining replicas do not count
        view = await scale.read([key], 2.0)
        assert dict(view.replicas) == {key: 0}
        assert view.gone == frozenset()
    finally:
        await scale.aclose()


async def test_kvpilot_run_on_the_simulator_reads_arrivals_as_on_a_cluster(simulator: tuple[str, LiveFleet]) -> None:
    # before: `kvpilot run` against the simulator was handed the router's exact count as a 30 s rate every tick
    # (SimulatorScale's gateway_rate), a path no deployment has: engines-fed unless collector.arrivals names a counter
    from kvpilot.runtime.sources import Sources
    from kvpilot.runtime.targets import StaticTargets
    from kvpilot.runtime.wiring import build_arrivals, build_scale
    from kvpilot.settings import load_settings

    url, live = simulator
    settings = load_settings(None)
    assert build_arrivals(settings) is None  # no gateway counter named: the engines' estimate
    scale = build_scale(settings, Sources(discovery=None, static=StaticTargets(), simulator_url=url))
    assert isinstance(scale, SimulatorScale)
    key = f"{live.fleet.config.namespace}/{live.fleet.config.deployment}"
    try:
        with live.lock:
            live.fleet.advance_to(60.0)
            first = live.fleet.snapshot(replicas=()).arrivals_total
        await scale.read([key], 0.0)
        with live.lock:
            live.fleet.advance_to(90.0)
            second = live.fleet.snapshot(replicas=()).arrivals_total
        view = await scale.read([key], 30.0)
    finally:
        await scale.aclose()
    assert second > first  # the router counted arrivals in this window
    assert dict(view.arrival_rates) == {}
    assert key in view.replicas
