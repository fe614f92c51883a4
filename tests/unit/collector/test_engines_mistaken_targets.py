"""Pages a user points kvpilot at on the way to an engine's say what they are (issue 12, session 30 helper F).

Real pages of KEDA's operator, Prometheus' node_exporter, the Prometheus server, cAdvisor (with its per-container
accelerator gauges of a Tesla K80), Kong's AI Gateway, Alertmanager, kube-state-metrics, Envoy and an OpenTelemetry
Collector: each was "found N families starting with `keda_`; no engine adapter (vllm, ...) reads these names", which
named nothing. Sources in tests/fixtures/metrics/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.adapt import NoGpuFamilies, adapt_page
from collector.engines import UnknownEngine
from collector.samples import TargetInfo

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
TARGET = TargetInfo(url="http://10.0.0.9:9100/metrics", pod="pod-0")
GPU_TARGET = TargetInfo(url="http://10.0.0.9:9100/metrics", pod="pod-0", kind="gpu")

NAMED = {
    "keda-operator-2.16__DataDog__integrations-core__keda_metrics__trimmed.txt": r"KEDA's operator .*docs/keda\.md",
    "node-exporter-e2e__prometheus__node_exporter__e2e_output__trimmed.txt": r"Prometheus' node_exporter",
    "prometheus-2.40-server__index-14084090669__trimmed.txt": r"the Prometheus server's own /metrics",
    "cadvisor-0.28-k80-accelerator__google__cadvisor__issue_1912__excerpt.txt": r"cAdvisor's per-container accel",
    "kong-ai-gateway-docs__index-69525788031__excerpt.txt": r"Kong's gateway",
    "alertmanager-0.24__index-14182870062__excerpt.txt": r"Prometheus' Alertmanager",
    "kube-state-metrics-gke__DataDog__integrations-core__ksm_standard_tags_gke__trimmed.txt": r"kube-state-metrics",
    "envoy-two-clusters__DataDog__integrations-core__envoy_openmetrics__trimmed.txt": r"Envoy's statistics .*not in an",
    "otelcol-elastic-8.15-internal__index-32346778844__excerpt.txt": r"OpenTelemetry Collector's own",
    # session 31: an Istio sidecar's merged page (istio-agent's series, then its Envoy's): was named as Envoy's, "scrape
    # the engines behind it", where under Istio the engine is in the same pod and merged onto this page by annotation
    "istio-1.11-merged-sidecar__DataDog__integrations-core__istio_merged__trimmed.txt": r"Istio's sidecar .*annotat",
    "nginx-ingress-controller-go1.10__DataDog__integrations-core__nginx_ingress_controller_metrics__trimmed.txt": (
        r"the NGINX Ingress controller .*scrape the engines"
    ),
    # session 32: llm-d's endpoint picker 1.x, a grep of its inference_* lines (pool gaie-sim, three pods), read right
    "llm-d-epp-1.4-gaie-sim-three-pods-grep__index-58599990987__excerpt.txt": r"endpoint picker .*scrape those servers",
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_a_page_pointed_at_by_mistake_is_named(name: str) -> None:
    with pytest.raises(UnknownEngine, match=NAMED[name]) as raised:
        adapt_page((PAGES / name).read_bytes(), TARGET, 0.0)
    assert "reads these names" not in str(raised.value)


@pytest.mark.parametrize("name", sorted(NAMED))
def test_naming_an_engine_for_it_is_refused_with_the_same_words(name: str) -> None:
    # `--engine vllm` on such a page: refused (the page has none of vLLM's families), and still says what it is
    with pytest.raises(UnknownEngine, match=NAMED[name]):
        adapt_page((PAGES / name).read_bytes(), TARGET, 0.0, engine="vllm")


def test_cadvisor_accelerator_gauges_on_a_gpu_target_are_named_not_read() -> None:
    # a GPU target: cAdvisor's GPU figures are no GPU exporter's kvpilot reads; it says what to scrape instead
    page = (PAGES / "cadvisor-0.28-k80-accelerator__google__cadvisor__issue_1912__excerpt.txt").read_bytes()
    with pytest.raises(NoGpuFamilies, match="cAdvisor's per-container accelerator gauges") as raised:
        adapt_page(page, GPU_TARGET, 0.0)
    assert "dcgm-exporter" in str(raised.value)


def test_cadvisor_without_accelerators_is_cadvisor() -> None:
    # the kubelet's /metrics/cadvisor of a node with no GPU container: its container_* gauges (names as cAdvisor writes)
    page = (
        '# TYPE container_cpu_usage_seconds_total counter\ncontainer_cpu_usage_seconds_total{id="/",name=""} 52.1\n'
        '# TYPE container_memory_working_set_bytes gauge\ncontainer_memory_working_set_bytes{id="/",name=""} 1e9\n'
    )
    with pytest.raises(UnknownEngine, match=r"cAdvisor \(cadvisor_version_info, container_\*") as raised:
        adapt_page(page, TARGET, 0.0)
    assert "accelerator" not in str(raised.value)
