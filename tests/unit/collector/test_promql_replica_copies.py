"""One series kept by several Prometheus servers (an HA pair behind a Thanos Querier without deduplication: the
copies differ in an external `prometheus_replica`/`replica` label), or one page scraped by two jobs: read once,
never summed. On f3f4b9b the copies were added up (1, 2 and 30 running read as 33) and a page scraped by two jobs
counted as two replicas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from collector.discovery.promql import from_settings
from collector.promql.series import REPLICA_LABELS, read_answers, rebuild_families
from collector.scrape import ScrapeResult
from kvpilot.settings import SettingsError, load_settings
from kvpilot.settings.discovery import DiscoverySettings

_TYPES = {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge"}
_POD = {"job": "vllm", "instance": "10.0.0.7:8000", "namespace": "llm", "pod": "llama-0", "model_name": "m"}


def _series(name: str, value: float, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": name, **_POD, **labels}, "value": [1.0, str(value)]}


def _read(*series: dict[str, Any], jobs: frozenset[str] = frozenset()) -> list[ScrapeResult]:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": list(series)}}).encode()
    return read_answers([("replicas", body)], None, _TYPES, 1.0, jobs, 0.0)


def _running_waiting(results: list[ScrapeResult]) -> list[tuple[str, float | None, float | None]]:
    return [(r.target.url, p.requests_running, p.requests_waiting) for r in results for p in r.replicas]


@pytest.mark.parametrize("label", ["prometheus_replica", "replica", "__replica__"])
@pytest.mark.parametrize("order", [("prom-a", "prom-b"), ("prom-b", "prom-a")])
def test_an_ha_pairs_copies_are_read_once_the_first_replicas(label: str, order: tuple[str, str]) -> None:
    value = {"prom-a": (3.0, 5.0), "prom-b": (4.0, 6.0)}  # the two servers scraped a second apart
    series = [
        s
        for copy in order
        for s in (
            _series("vllm:num_requests_running", value[copy][0], **{label: copy}),
            _series("vllm:num_requests_waiting", value[copy][1], **{label: copy}),
        )
    ]
    # prom-a's copy whichever comes first in the answer; before: 7 running, 11 waiting
    assert _running_waiting(_read(*series)) == [("promql://vllm/10.0.0.7:8000", 3.0, 5.0)]


def test_identical_copies_are_read_once() -> None:
    # helper H's probe (/tmp/s18/H/promdup.py): three copies with the same labels read as 33
    series = [_series("vllm:num_requests_running", v) for v in (1.0, 2.0, 30.0)]
    assert _running_waiting(_read(*series, _series("vllm:num_requests_waiting", 4.0))) == [
        ("promql://vllm/10.0.0.7:8000", 1.0, 4.0)
    ]


def test_a_series_only_one_replica_has_is_read_from_it() -> None:
    # prom-a lost the waiting series (restarted, a gap): the page is read from prom-b, the copy that has it all (one
    # server's page, never a mix: a counter hopping between servers scraped seconds apart reads as a restart)
    results = _read(
        _series("vllm:num_requests_running", 3.0, prometheus_replica="prom-a"),
        _series("vllm:num_requests_running", 4.0, prometheus_replica="prom-b"),
        _series("vllm:num_requests_waiting", 6.0, prometheus_replica="prom-b"),
    )
    assert _running_waiting(results) == [("promql://vllm/10.0.0.7:8000", 4.0, 6.0)]
    assert [r.copy for r in results] == [("prom-b", "", "")]


def test_a_target_is_down_only_when_every_copy_says_so() -> None:
    up_a = {"metric": {"__name__": "up", **_POD, "prometheus_replica": "prom-a"}, "value": [1.0, "0"]}
    up_b = {"metric": {"__name__": "up", **_POD, "prometheus_replica": "prom-b"}, "value": [1.0, "1"]}
    running = _series("vllm:num_requests_running", 4.0, prometheus_replica="prom-b")
    (result,) = _read(up_a, up_b, running)
    assert result.ok, result.error
    assert _running_waiting([result]) == [("promql://vllm/10.0.0.7:8000", 4.0, None)]
    (down,) = _read(up_a, {**up_b, "value": [1.0, "0"]}, jobs=frozenset({"vllm"}))
    assert not down.ok


def test_series_that_differ_in_a_page_label_are_not_copies() -> None:
    families = rebuild_families(
        [
            _series("vllm:num_requests_running", 1.0, model_name="a"),
            _series("vllm:num_requests_running", 2.0, model_name="b"),
        ],
        _TYPES,
    )
    assert sorted(s.value for s in families["vllm:num_requests_running"].samples) == [1.0, 2.0]


def test_one_page_scraped_by_two_jobs_is_one_target() -> None:
    # a ServiceMonitor and a PodMonitor on one pod: the same series under job vllm and job vllm-pods; before: two
    # replicas of llama, each with 3 running (the deployment's queue and rates doubled)
    series = [
        _series(name, value, job=job)
        for job in ("vllm-pods", "vllm")
        for name, value in (("vllm:num_requests_running", 3.0), ("vllm:num_requests_waiting", 5.0))
    ]
    assert _running_waiting(_read(*series)) == [("promql://vllm/10.0.0.7:8000", 3.0, 5.0)]


def test_two_pages_of_one_instance_under_two_jobs_are_both_read() -> None:
    # instance relabelled to the pod's name and two ports: different series under the two jobs, two pages
    dcgm = {"__name__": "DCGM_FI_DEV_GPU_UTIL", **_POD, "job": "gpu", "gpu": "0", "UUID": "GPU-a"}
    results = _read(
        _series("vllm:num_requests_running", 3.0),
        {"metric": dcgm, "value": [1.0, "90"]},
    )
    assert sorted(r.target.url for r in results) == ["promql://gpu/10.0.0.7:8000", "promql://vllm/10.0.0.7:8000"]


@pytest.mark.parametrize(
    ("pod_of", "urls"),
    [
        # one address, a path per pod (chat-0, chat-1): two replicas
        ({"vllm": "chat-0", "vllm-b": "chat-1"}, ["promql://vllm-b/10.0.0.7:8000", "promql://vllm/10.0.0.7:8000"]),
        # no pod label to tell: read as two pages, as before
        ({"vllm": "", "vllm-b": ""}, ["promql://vllm-b/10.0.0.7:8000", "promql://vllm/10.0.0.7:8000"]),
    ],
)
def test_one_instance_under_two_jobs_for_other_pods_is_two_pages(pod_of: dict[str, str], urls: list[str]) -> None:
    results = _read(*(_series("vllm:num_requests_running", 3.0, job=job, pod=pod) for job, pod in pod_of.items()))
    assert sorted(r.target.url for r in results) == urls


def test_the_replica_labels_are_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DiscoverySettings().promql_replica_labels == REPLICA_LABELS
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__KIND", "promql")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", "http://prom:9090")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_REPLICA_LABELS", '["cluster_replica"]')
    settings = load_settings()
    assert from_settings(settings.collector.discovery).replica_labels == ("cluster_replica",)
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_REPLICA_LABELS", '["bad-name"]')
    with pytest.raises(SettingsError, match="label names"):
        load_settings()


def test_copies_told_apart_by_a_configured_label_are_read_once() -> None:
    series = [_series("vllm:num_requests_running", v, cluster_replica=c) for c, v in (("b", 4.0), ("a", 3.0))]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": series}}).encode()
    read = read_answers([("q", body)], None, _TYPES, 1.0, frozenset(), 0.0, replica_labels=("cluster_replica",))
    assert _running_waiting(read) == [("promql://vllm/10.0.0.7:8000", 3.0, None)]
    # not named: two series of the page (a label of its own), both read and added up as before
    (page,) = _read(*series)
    assert [p.requests_running for p in page.replicas] == [7.0]
