"""Kubernetes discovery's list in pages (limit + continue, as client-go's pager), on the fake API server's paging."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from collector.discovery.kubernetes import KubernetesDiscovery
from collector.discovery.pager import list_pages, model_reader
from tests.fakekube import FakeKube
from tests.helpers.poll import wait_for
from tests.unit.collector.test_discovery_kubernetes import pod_dict


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def _pods(kube: FakeKube, n: int, ns: str = "prod") -> None:
    for i in range(n):
        kube.create("pods", pod_dict(f"p{i:05d}", ns=ns, ip=f"10.0.{i // 256}.{i % 256}", ports=[8000]))


def _lists(kube: FakeKube) -> int:
    return sum(1 for method, path in kube.requests if method == "GET" and path.endswith("/pods"))


async def test_two_thousand_pods_are_listed_in_four_pages_of_500(kube: FakeKube) -> None:
    _pods(kube, 2000)
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30)
    try:
        targets = await disc.targets()
        assert len(targets) == 2000
        assert len({t.pod for t in targets}) == 2000
        assert disc.list_requests == 4
        assert disc.lists == 1
        # the fake counts 4 list requests, then the watch: before, one request with every pod in one body
        wait_for(lambda: _lists(kube) == 5, what="4 pages and the watch")
    finally:
        disc.stop()


def test_each_page_carries_limit_and_the_previous_continue_token(kube: FakeKube) -> None:
    _pods(kube, 1200)
    core = client.CoreV1Api(kube.api_client())
    asked: list[dict[str, Any]] = []

    def call(*args: Any, **kw: Any) -> Any:
        asked.append(kw)
        return core.list_namespaced_pod(*args, **kw)

    listed = list_pages(call, "prod", read=model_reader(client.V1Pod, "pod"), kind="PodList")
    assert (len(listed.items), listed.requests, listed.relisted) == (1200, 3, False)
    assert [kw["limit"] for kw in asked] == [500] * 3
    tokens = [kw.get("_continue") for kw in asked]
    assert tokens[0] is None
    assert all(tokens[1:])
    assert tokens[1] != tokens[2]
    assert listed.resource_version == str(kube.store.resource_version)


def test_the_fake_answers_remaining_item_count_and_a_token_only_while_more_follow(kube: FakeKube) -> None:
    _pods(kube, 7)
    rt = kube.resource("pods")
    items, rv, token, remaining = kube.store.list_page(rt, "prod", limit=5)
    assert (len(items), remaining, token is not None) == (5, 2, True)
    rest, rv2, token2, remaining2 = kube.store.list_page(rt, "prod", limit=5, continue_token=token)
    assert [p["metadata"]["name"] for p in rest] == ["p00005", "p00006"]
    assert (rv2, token2, remaining2) == (rv, None, None)
    # with a selector the API server gives no remainingItemCount
    assert kube.store.list_page(rt, "prod", limit=5, label_selector="app=llama")[3] is None


async def test_a_continue_token_expired_mid_list_is_followed_by_one_full_list(kube: FakeKube) -> None:
    _pods(kube, 1500)
    pages: list[str] = []

    def compact_after_the_first_page(method: str, path: str) -> None:
        if method == "GET" and path.endswith("/pods"):
            pages.append(path)
            if len(pages) == 2:  # the second page is asked: its token's resourceVersion is compacted now
                kube.store.compact()
        return None

    kube.intercept = compact_after_the_first_page
    disc = KubernetesDiscovery(kube.api_client(), namespace="prod", watch_timeout_s=30)
    try:
        targets = await disc.targets()
        assert disc.last_error is None  # the 410 was no failure (read before stop(), which cuts the watch)
    finally:
        disc.stop()
    assert len(targets) == 1500  # complete: the full list after the 410, not the first page alone
    assert disc.lists == 1
    assert disc.list_requests == 3  # page 1, page 2 (410 Gone), one full list


def test_the_fake_answers_410_expired_for_a_compacted_continue_token(kube: FakeKube) -> None:
    _pods(kube, 3)
    core = client.CoreV1Api(kube.api_client())
    token = core.list_namespaced_pod("prod", limit=2).metadata._continue
    kube.store.compact()
    with pytest.raises(client.ApiException) as e:
        core.list_namespaced_pod("prod", limit=2, _continue=token)
    assert e.value.status == 410
    assert "continue parameter is too old" in str(e.value.body)


def test_one_pod_the_client_refuses_costs_only_itself_on_any_page(kube: FakeKube) -> None:
    _pods(kube, 1000)
    odd = pod_dict("p00700", ip="10.9.9.9", ports=[8000])
    odd["spec"]["containers"][0]["ports"] = [{"name": "http"}]  # named, not numbered: the model refuses it
    kube.delete("pods", "p00700", "prod")
    kube.create("pods", odd)
    core = client.CoreV1Api(kube.api_client())
    listed = list_pages(core.list_namespaced_pod, "prod", read=model_reader(client.V1Pod, "pod"), kind="PodList")
    assert len(listed.items) == 999
    assert listed.requests == 2
    assert "p00700" not in {p.metadata.name for p in listed.items}


def test_page_size_zero_is_one_unpaged_list(kube: FakeKube) -> None:
    _pods(kube, 600)
    core = client.CoreV1Api(kube.api_client())
    listed = list_pages(core.list_namespaced_pod, "prod", read=lambda raw: raw, kind="PodList", page_size=0)
    assert (len(listed.items), listed.requests) == (600, 1)
