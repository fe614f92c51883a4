"""Replica counts and rollout status from kube-state-metrics' Deployment series, read through the PromQL source's
client from the loopback Prometheus API server: the same ``DeploymentRollout`` as ``deployment_rollout`` reads off
the object, deletions told from an exporter that went away, and no kube-state-metrics said once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from collector.discovery.promql import PromQLSource
from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import KubernetesScale, deployment_rollout
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_scale
from tests.services.promapi import T0, FakeFleet
from tests.unit.kvpilot.fleet_double import settings_for
from tests.unit.kvpilot.runtime.ksm_double import deployment, ksm_series, ksm_up


@pytest.fixture
async def ksm(promapi_fleet: tuple[FakeFleet, str]) -> AsyncIterator[tuple[FakeFleet, PromQLSource]]:
    fleet, url = promapi_fleet
    fleet.ksm, fleet.calls = [], {}
    source = PromQLSource(url, reader="thread", timeout_s=5.0)
    yield fleet, source
    await source.aclose()


DEPLOYMENTS = [
    # RollingUpdate at the defaults, 10 replicas: surge rounds 2.5 up to 3, unavailable down to 2; mid-rollout
    deployment("pct", replicas=10, generation=3, observed=3, updated=3, status_replicas=12, ready=10),
    # integer fenceposts, finished
    deployment("int", replicas=4, generation=2, observed=2, max_surge=0, max_unavailable=1),
    # percentages that round apart: 33 % of 3 is 1 surge (up), 0 unavailable (down)
    deployment(
        "odd",
        replicas=3,
        generation=4,
        observed=4,
        updated=1,
        status_replicas=4,
        max_surge="33%",
        max_unavailable="33%",
    ),
    # Recreate: no fencepost exported; the whole set at once
    deployment(
        "recreate", replicas=3, generation=2, observed=2, updated=0, status_replicas=3, ready=0, strategy="Recreate"
    ),
    # just edited: generation 2 not yet observed
    deployment("edited", replicas=4, generation=2, observed=1, updated=0, status_replicas=4),
    # paused mid-rollout
    deployment(
        "paused",
        replicas=5,
        generation=5,
        observed=5,
        updated=2,
        status_replicas=6,
        ready=6,
        paused=True,
        max_surge="50%",
        max_unavailable=0,
    ),
    # at zero
    deployment("zero", replicas=0, generation=7, observed=7),
]


async def test_kube_state_metrics_series_give_the_objects_rollout_status(
    ksm: tuple[FakeFleet, PromQLSource],
) -> None:
    fleet, source = ksm
    fleet.ksm = [s for d in DEPLOYMENTS for s in ksm_series(d)]
    # a Deployment of another namespace and one kvpilot does not decide: not asked, not answered
    fleet.ksm += ksm_series(deployment("other", replicas=2, namespace="batch")) + ksm_series(
        deployment("unmanaged", replicas=9)
    )
    keys = [f"llm/{d.metadata.name}" for d in DEPLOYMENTS]
    view = await KubeStateMetricsScale(source.query_vector).read(keys, T0)
    assert dict(view.rollouts) == {f"llm/{d.metadata.name}": deployment_rollout(d) for d in DEPLOYMENTS}
    assert dict(view.replicas) == {f"llm/{d.metadata.name}": d.spec.replicas for d in DEPLOYMENTS}
    assert view.gone == frozenset()
    assert fleet.calls == {"ksm": 1}  # one query for every deployment asked
    # what KubernetesScale reads off the same objects
    ns = type("Listing", (), {"items": DEPLOYMENTS})

    class Apps:
        def list_namespaced_deployment(self, namespace: str, **_: object) -> object:
            return ns

    k8s = await KubernetesScale(Apps()).read(keys, T0)
    assert (dict(k8s.replicas), dict(k8s.rollouts)) == (dict(view.replicas), dict(view.rollouts))


async def test_a_deployment_the_controller_has_not_reported_on_and_an_older_exporter(
    ksm: tuple[FakeFleet, PromQLSource],
) -> None:
    fleet, source = ksm
    new = deployment("new", replicas=2, generation=1, observed=None)  # observedGeneration exported as 0
    v1 = deployment("v1", replicas=4, generation=2, observed=2, updated=2, status_replicas=5, ready=4)
    fleet.ksm = ksm_series(new) + ksm_series(v1, ready_series=False)  # an older exporter: _available only
    view = await KubeStateMetricsScale(source.query_vector).read(["llm/new", "llm/v1"], T0)
    with pytest.raises(ValueError, match="not reported"):
        deployment_rollout(new)
    # counted, no rollout status: as KubernetesScale leaves a Deployment deployment_rollout refuses
    assert dict(view.replicas) == {"llm/new": 2, "llm/v1": 4}
    assert dict(view.rollouts) == {"llm/v1": deployment_rollout(v1)}


async def test_deleted_is_told_from_an_exporter_that_went_away(ksm: tuple[FakeFleet, PromQLSource]) -> None:
    fleet, source = ksm
    a, b = deployment("a", replicas=2), deployment("b", replicas=3)
    # two kube-state-metrics shards, one Deployment each
    fleet.ksm = [*ksm_series(a, instance="ksm-0:8080"), *ksm_series(b, instance="ksm-1:8080")]
    fleet.ksm += [ksm_up(instance="ksm-0:8080"), ksm_up(instance="ksm-1:8080")]
    scale = KubeStateMetricsScale(source.query_vector)
    view = await scale.read(["llm/a", "llm/b"], T0)
    assert dict(view.replicas) == {"llm/a": 2, "llm/b": 3}
    # shard 1 down: its series go stale with it; b says nothing of itself, it is not deleted
    fleet.ksm = [
        *ksm_series(a, instance="ksm-0:8080"),
        ksm_up(instance="ksm-0:8080"),
        ksm_up(instance="ksm-1:8080", up=False),
    ]
    view = await scale.read(["llm/a", "llm/b"], T0 + 5)
    assert (dict(view.replicas), view.gone) == ({"llm/a": 2}, frozenset())
    # a deleted while its exporter answers: gone, once
    fleet.ksm = [ksm_up(instance="ksm-0:8080"), *ksm_series(b, instance="ksm-1:8080"), ksm_up(instance="ksm-1:8080")]
    view = await scale.read(["llm/a", "llm/b"], T0 + 10)
    assert (dict(view.replicas), view.gone) == ({"llm/b": 3}, frozenset({"llm/a"}))
    view = await scale.read(["llm/a", "llm/b"], T0 + 15)
    assert view.gone == frozenset()
    # the last deployment asked deleted, its exporter answering: gone, although the answer holds no series
    fleet.ksm = [ksm_up(instance="ksm-0:8080"), ksm_up(instance="ksm-1:8080")]
    view = await scale.read(["llm/b"], T0 + 20)
    assert (dict(view.replicas), view.gone) == ({}, frozenset({"llm/b"}))
    # no series and no exporter at all: nothing is taken for deleted
    fleet.ksm = [*ksm_series(a, instance="ksm-0:8080"), ksm_up(instance="ksm-0:8080")]
    assert dict((await scale.read(["llm/a"], T0 + 25)).replicas) == {"llm/a": 2}
    fleet.ksm = []
    view = await scale.read(["llm/a"], T0 + 30)
    assert (dict(view.replicas), view.gone) == ({}, frozenset())


async def test_without_an_instance_label_every_exporter_of_the_job_must_answer(
    ksm: tuple[FakeFleet, PromQLSource],
) -> None:
    fleet, source = ksm
    a, b = deployment("a", replicas=2), deployment("b", replicas=3)
    # the instance label dropped from kube-state-metrics' series (OpenShift's monitoring does); its `up` keeps it
    ups = [ksm_up(instance="ksm-0:8080"), ksm_up(instance="ksm-1:8080")]
    fleet.ksm = [*ksm_series(a, instance=""), *ksm_series(b, instance=""), *ups]
    scale = KubeStateMetricsScale(source.query_vector)
    assert dict((await scale.read(["llm/a", "llm/b"], T0)).replicas) == {"llm/a": 2, "llm/b": 3}
    # one exporter of the job down: which one exported a is unknown, so a is not taken for deleted
    fleet.ksm = [*ksm_series(b, instance=""), ups[0], ksm_up(instance="ksm-1:8080", up=False)]
    assert (await scale.read(["llm/a", "llm/b"], T0 + 5)).gone == frozenset()
    # every exporter answers and a is still missing: deleted
    fleet.ksm = [*ksm_series(b, instance=""), *ups]
    assert (await scale.read(["llm/a", "llm/b"], T0 + 10)).gone == frozenset({"llm/a"})


async def test_no_kube_state_metrics_is_one_log_line_and_no_answer(
    ksm: tuple[FakeFleet, PromQLSource], caplog: pytest.LogCaptureFixture
) -> None:
    _, source = ksm
    scale = KubeStateMetricsScale(source.query_vector)
    with caplog.at_level(logging.INFO, logger="kvpilot.runtime.scale_ksm"):
        views = [await scale.read(["llm/chat", "llm/code"], T0 + 5 * i) for i in range(4)]
    assert all((dict(v.replicas), dict(v.rollouts), v.gone) == ({}, {}, frozenset()) for v in views)
    lines = [r for r in caplog.records if r.name == "kvpilot.runtime.scale_ksm"]
    assert len(lines) == 1
    assert lines[0].levelno == logging.WARNING
    assert "no kube_deployment_* series" in lines[0].getMessage()
    assert "promql_kube_state_metrics: false" in lines[0].getMessage()


async def test_a_prometheus_that_fails_answers_nothing_for_the_tick(caplog: pytest.LogCaptureFixture) -> None:
    source = PromQLSource("http://127.0.0.1:9", reader="thread", timeout_s=1.0)  # nothing listens
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.scale_ksm"):
        view = await KubeStateMetricsScale(source.query_vector).read(["llm/chat"], T0)
    await source.aclose()
    assert (dict(view.replicas), view.gone) == ({}, frozenset())
    assert any("cannot read the Deployment series" in r.getMessage() for r in caplog.records)


def _with(series: list[tuple[dict[str, str], float]], name: str, value: float) -> list[tuple[dict[str, str], float]]:
    return [(m, value if m["__name__"] == name else v) for m, v in series]


async def test_unreadable_series_leave_their_deployment_out(
    ksm: tuple[FakeFleet, PromQLSource], caplog: pytest.LogCaptureFixture
) -> None:
    fleet, source = ksm
    rolling: dict[str, Any] = {"generation": 2, "observed": 2, "updated": 1, "status_replicas": 5}
    good = {n: ksm_series(deployment(n, replicas=4, **rolling)) for n in ("nan", "neg", "frac", "dup", "twin", "ok")}
    fleet.ksm = [
        # NaN replicas, a negative count, a fractional one: no count kube-state-metrics would export
        *_with(good["nan"], "kube_deployment_spec_replicas", float("nan")),
        *_with(good["neg"], "kube_deployment_status_replicas_updated", -1.0),
        *_with(good["frac"], "kube_deployment_status_replicas", 4.5),
        # two exporters disagreeing on one series
        *good["dup"],
        *_with(
            ksm_series(deployment("dup", replicas=4, **rolling), instance="10.0.0.10:8080"),
            "kube_deployment_status_replicas_updated",
            3.0,
        ),
        # two exporters agreeing (kube-state-metrics run twice): one fact
        *good["twin"],
        *ksm_series(deployment("twin", replicas=4, **rolling), instance="10.0.0.10:8080"),
        *good["ok"],
    ]
    keys = [f"llm/{n}" for n in good]
    scale = KubeStateMetricsScale(source.query_vector)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.scale_ksm"):
        view = await scale.read(keys, T0)
        again = await scale.read(keys, T0 + 5)
    assert set(view.replicas) == set(view.rollouts) == {"llm/twin", "llm/ok"}
    assert view.rollouts["llm/twin"].in_progress
    assert view.gone == frozenset()
    assert (dict(again.replicas), again.gone) == (dict(view.replicas), frozenset())
    left_out = sorted(r.getMessage().split()[1] for r in caplog.records)  # once each, not every tick
    assert left_out == ["llm/dup", "llm/frac", "llm/nan", "llm/neg"]


def test_the_promql_source_reads_kube_state_metrics_unless_turned_off(tmp_path: object) -> None:
    url = "sqlite://"
    promql = PromQLSource("http://127.0.0.1:9", extra_selector='cluster="a"')
    sources = Sources(discovery=promql, static=StaticTargets(), collector=promql)
    discovery = {"kind": "promql", "promql_url": "http://127.0.0.1:9"}
    on = settings_for(url, collector={"interval_s": 5, "discovery": discovery})
    assert isinstance(build_scale(on, sources), KubeStateMetricsScale)
    off = settings_for(url, collector={"interval_s": 5, "discovery": {**discovery, "promql_kube_state_metrics": False}})
    assert build_scale(off, sources) is None
