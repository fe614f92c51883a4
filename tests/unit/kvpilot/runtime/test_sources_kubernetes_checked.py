"""A pod's annotations are anyone's to write who may create a pod in a watched namespace, and two of them become a
target's names as they are: ``kvpilot.io/deployment`` (the scaling unit's name: labels, the store's key, KEDA's
deployment) and ``kvpilot.io/path`` (its URL). The targets file and the API hold both to the rules of
``store.fields.TargetSpec`` (a Kubernetes name; a URL of at most 2,048 characters, no white space or control
character); Kubernetes discovery took any text (session 23, hostile input round 8): a deployment named ``a/b`` (a
key of three parts, which KEDA and the API cannot name), ``Bad Name`` or 300 characters (past the store's column:
PostgreSQL refuses the row), a path of 64,000 ``?``. Now a pod's target is held to the same rules, and one that
breaks them is left out with one error naming the pod and why, the others scraped as before."""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config as kube_config

from collector.discovery.kubernetes import KubernetesDiscovery
from collector.samples import TargetInfo
from kvpilot.runtime.sources import build
from kvpilot.settings import load_settings
from tests.fakekube import FakeKube
from tests.unit.collector.test_discovery_kubernetes import pod_dict

HOSTILE = [
    {"kvpilot.io/deployment": "a/b"},
    {"kvpilot.io/deployment": "Bad Name"},
    {"kvpilot.io/deployment": "x" * 300},
    {"kvpilot.io/deployment": "chat\x1b[2J"},
    {"kvpilot.io/path": "/m?a=" + "?" * 64_000},
    {"kvpilot.io/path": "/metrics HTTP/1.1\r\nX-Injected: 1"},
]


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    with FakeKube() as fake:
        config = tmp_path / "kubeconfig"
        config.write_text(
            f"apiVersion: v1\nkind: Config\nclusters: [{{name: f, cluster: {{server: '{fake.url}'}}}}]\n"
            "users: [{name: u, user: {}}]\ncontexts: [{name: c, context: {cluster: f, user: u}}]\n"
            "current-context: c\n"
        )
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        load = kube_config.load_kube_config  # the client reads KUBECONFIG once, when imported
        monkeypatch.setattr(kube_config, "load_kube_config", lambda: load(config_file=str(config)))
        yield fake


@pytest.mark.parametrize("annotations", HOSTILE, ids=["slash", "space", "300-chars", "escape", "q-run", "crlf"])
async def test_a_pod_whose_annotations_break_the_targets_rules_is_left_out_in_words(
    kube: FakeKube,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    annotations: dict[str, str],
) -> None:
    kube.create("pods", pod_dict("good", ports=[8000]), namespace="prod")
    kube.create("pods", pod_dict("hostile", ports=[8000], annotations=annotations), namespace="prod")
    settings_file = tmp_path / "k.yaml"
    settings_file.write_text("collector:\n  discovery:\n    kind: kubernetes\n    kubernetes_namespace: prod\n")
    started: list[KubernetesDiscovery] = []
    start = KubernetesDiscovery.start
    monkeypatch.setattr(KubernetesDiscovery, "start", lambda self: (started.append(self), start(self))[1])
    disc: Any = build(load_settings(settings_file)).discovery
    try:
        with caplog.at_level(logging.ERROR):
            first = await disc.targets()
            again = await disc.targets()
    finally:
        for d in started:
            d.stop()
    assert [t.pod for t in first] == ["good"]
    assert [t.pod for t in again] == ["good"]
    said = [r.getMessage() for r in caplog.records if "hostile" in r.getMessage()]
    assert len(said) == 1, said  # once, not every tick
    assert "left out" in said[0]
    assert len(said[0]) < 1000  # the path named shortened, never 64,000 characters of it


async def test_pods_left_out_are_said_once_and_not_kept_whole() -> None:
    # Each refused target was remembered by its whole URL, for good, so that it is said once: a pod's path annotation
    # may run to 256 KiB, and pods created and deleted in turn grew kvpilot by every path (200 pods of 64 KiB: 13 MB)
    from kvpilot.runtime.sources import _Checked

    path = "/m?" + "?" * 65_536
    shown: list[int] = []

    async def one_new_pod() -> list[TargetInfo]:
        i = len(shown)
        shown.append(i)
        return [TargetInfo(url=f"http://10.1.{i // 200}.{i % 200}:8000{path}", namespace="prod", pod=f"p{i}")]

    checked = _Checked(one_new_pod, "kubernetes discovery", by_pod=True)
    await checked()  # the first call's own allocations (pydantic's, logging's) are not what is measured
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            assert await checked() == []
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 2_000_000, kept

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("kvpilot.runtime.sources").addHandler(handler)
    try:
        same = TargetInfo(url=f"http://10.2.0.1:8000{path}", namespace="prod", pod="again")

        async def the_same_pod() -> list[TargetInfo]:
            return [same]

        again = _Checked(the_same_pod, "kubernetes discovery", by_pod=True)
        for _ in range(3):
            assert await again() == []
    finally:
        logging.getLogger("kvpilot.runtime.sources").removeHandler(handler)
    assert len(said) == 1, said  # still said once, not every tick


async def test_a_pod_left_out_is_checked_once_not_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kubernetes discovery hands the same target objects every tick, and a target taken is checked once; one left
    # out was checked again each tick (a pydantic validation error a pod: 1,000 hostile pods ~20 ms a tick)
    from kvpilot.runtime import sources

    checks: list[str] = []

    class Counted(sources.TargetSpec):
        def __init__(self, **fields: Any) -> None:
            checks.append(fields["url"])
            super().__init__(**fields)

    monkeypatch.setattr(sources, "TargetSpec", Counted)
    hostile = TargetInfo(url="http://10.3.0.1:8000/m", namespace="prod", pod="bad", deployment="Bad Name")
    good = TargetInfo(url="http://10.3.0.2:8000/m", namespace="prod", pod="good", deployment="chat")

    async def the_same_pods() -> list[TargetInfo]:
        return [hostile, good]

    checked = sources._Checked(the_same_pods, "kubernetes discovery", by_pod=True)
    for _ in range(3):
        assert await checked() == [good]
    assert sorted(checks) == sorted([hostile.url, good.url])  # each once
    moved = TargetInfo(url=hostile.url, namespace="prod", pod="bad", deployment="chat")  # the pod fixed: a new object

    async def fixed() -> list[TargetInfo]:
        return [moved, good]

    checked._source = fixed
    assert await checked() == [moved, good]
