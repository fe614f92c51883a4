"""KubernetesScale's deployment list: one Deployment the client's models refuse answers nothing for itself alone, the
others of its namespace are counted (before, the whole namespace's list failed: every deployment in it, every tick)."""

from __future__ import annotations

from kubernetes import client

from kvpilot.runtime.scale_view import KubernetesScale
from tests.fakekube.scale import deployment
from tests.fakekube.server import FakeKube


async def test_one_deployment_the_client_refuses_costs_only_itself(kube: FakeKube) -> None:
    kube.create("deployments", deployment("chat", "llm", replicas=2), namespace="llm")
    kube.create("deployments", deployment("code", "llm", replicas=3), namespace="llm")
    odd = deployment("odd", "llm", replicas=4)
    odd["spec"]["template"]["spec"]["containers"] = [{"image": "x"}]  # a container with no name: the model refuses it
    kube.create("deployments", odd, namespace="llm")
    with kube.api_client() as api:
        scale = KubernetesScale(client.AppsV1Api(api))
        view = await scale.read(["llm/chat", "llm/code", "llm/odd"], 0.0)
        assert dict(view.replicas) == {"llm/chat": 2, "llm/code": 3}
        assert view.gone == frozenset()
        # listed once and readable, then unreadable: not taken for deleted (it keeps its last decision)
        kube.delete("deployments", "odd", namespace="llm")
        kube.create("deployments", deployment("odd", "llm", replicas=4), namespace="llm")
        assert dict((await scale.read(["llm/odd"], 5.0)).replicas) == {"llm/odd": 4}
        kube.delete("deployments", "odd", namespace="llm")
        kube.create("deployments", odd, namespace="llm")
        view = await scale.read(["llm/chat", "llm/odd"], 10.0)
        assert (dict(view.replicas), view.gone) == ({"llm/chat": 2}, frozenset())


async def test_deployments_are_listed_in_pages(kube: FakeKube) -> None:
    for i in range(600):
        kube.create("deployments", deployment(f"d{i:03d}", "llm", replicas=i % 5), namespace="llm")
    with kube.api_client() as api:
        view = await KubernetesScale(client.AppsV1Api(api), timeout_s=30.0).read(["llm/d000", "llm/d599"], 0.0)
    assert dict(view.replicas) == {"llm/d000": 0, "llm/d599": 4}
    lists = [path for method, path in kube.requests if method == "GET" and path.endswith("/deployments")]
    assert len(lists) == 2  # 500 + 100
