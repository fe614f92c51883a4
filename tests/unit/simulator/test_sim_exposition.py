"""The /metrics pages: names, types, labels and buckets as the real engines and exporters write them.

Where a real capture exists (tests/fixtures/metrics), every family we emit must appear there with the same type.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator import Fleet, FleetConfig, load_trace, parse_fault
from simulator.exposition import ENGINES, render_node, render_replica
from simulator.snapshot import FleetSnapshot


@pytest.fixture(scope="module")
def snap() -> FleetSnapshot:
    f = Fleet(FleetConfig(replicas=2), load_trace("synthetic:duration_s=120,rate=8", seed=2))
    f.advance_to(120)
    f.inject(parse_fault({"type": "xid", "node": "node-0", "gpu": 1, "xid": 48}))
    return f.snapshot()


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))


def _label_names(text: str) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for fam in text_string_to_metric_families(text):
        names: set[str] = set()
        for s in fam.samples:
            names |= set(s.labels) - {"le", "quantile"}
        out[fam.name] = frozenset(names)
    # The text parser strips `_total` from counter names; TYPE lines keep what the page wrote.
    return out | {f"{k}_total": v for k, v in out.items()}


def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


VLLM_BUCKETS = {
    "vllm:time_to_first_token_seconds": "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1 2.5 5 7.5 10 20 "
    "40 80 160 640 2560",
    "vllm:inter_token_latency_seconds": "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1 2.5 5 7.5 10 20 40 80",
    "vllm:e2e_request_latency_seconds": "0.3 0.5 0.8 1 1.5 2 2.5 5 10 15 20 30 40 50 60 120 240 480 960 1920 7680",
}


@pytest.mark.parametrize(("family", "bounds"), sorted(VLLM_BUCKETS.items()))
def test_vllm_histogram_buckets_are_the_engines(snap: FleetSnapshot, family: str, bounds: str) -> None:
    fam = _families(render_replica(snap.replicas[0], "vllm").decode())[family]
    les = [float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]
    assert les == [float(b) for b in bounds.split()]


def test_vllm_core_series_carry_model_name_and_engine(snap: FleetSnapshot) -> None:
    fams = _families(render_replica(snap.replicas[0], "vllm").decode())
    core = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions", "vllm:prompt_tokens",
            "vllm:generation_tokens", "vllm:request_success"]  # fmt: skip
    for name in core:
        for s in fams[name].samples:
            assert {"model_name", "engine"} <= set(s.labels), name
            assert s.labels["engine"] == "0"
    hits = fams["vllm:prefix_cache_hits"].samples[0].value
    queries = fams["vllm:prefix_cache_queries"].samples[0].value
    assert 0 < hits <= queries  # the synthetic trace shares prefixes


def test_vllm_page_matches_the_handwritten_v1_fixture_types(snap: FleetSnapshot, metrics_fixtures: Path) -> None:
    ours_text = render_replica(snap.replicas[0], "vllm").decode()
    real_text = (metrics_fixtures / "vllm-v1-dp2__handwritten.txt").read_text()
    ours, real = _types(ours_text), _types(real_text)
    shared = set(ours) & set(real)
    assert len(shared) >= 10
    assert {n: ours[n] for n in shared} == {n: real[n] for n in shared}
    ours_labels, real_labels = _label_names(ours_text), _label_names(real_text)
    assert {n: ours_labels[n] for n in shared} == {n: real_labels[n] for n in shared}


@pytest.mark.parametrize(
    ("engine", "fixture"),
    [
        ("sglang", "sglang__DataDog__integrations-core__sglang_metrics.txt"),  # real SGLang capture
        ("tgi", "tgi__DataDog__integrations-core__payload__partial.txt"),  # real TGI capture (partial)
        ("llamacpp", "llamacpp-without-kv__handwritten.txt"),  # current llama-server names
    ],
)
def test_engine_pages_use_the_real_names_and_types(
    snap: FleetSnapshot, metrics_fixtures: Path, engine: str, fixture: str
) -> None:
    ours_text = render_replica(snap.replicas[0], engine).decode()
    real_text = (metrics_fixtures / fixture).read_text()
    ours, real = _types(ours_text), _types(real_text)
    shared = set(ours) & set(real)
    assert len(shared) >= 3, sorted(ours)
    assert {n: ours[n] for n in shared} == {n: real[n] for n in shared}
    # Same label names on the shared families' samples (bucket bounds aside).
    ours_labels, real_labels = _label_names(ours_text), _label_names(real_text)
    assert {n: ours_labels[n] for n in shared} == {n: real_labels[n] for n in shared}


def test_tgi_durations_use_tgis_geometric_buckets_exactly(snap: FleetSnapshot) -> None:
    fams = _families(render_replica(snap.replicas[0], "tgi").decode())
    buckets = [s for s in fams["tgi_request_duration"].samples if s.name.endswith("_bucket")]
    les = [float(s.labels["le"]) for s in buckets if s.labels["le"] != "+Inf"]
    assert les == pytest.approx([0.0001 * 1.5**k for k in range(35)])
    # Re-bucketing loses nothing: the +Inf bucket holds every finished request, as vLLM's page does.
    vllm = _families(render_replica(snap.replicas[0], "vllm").decode())["vllm:e2e_request_latency_seconds"]
    inf = [s.value for s in vllm.samples if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
    assert buckets[-1].value == inf[0] == snap.replicas[0].requests_finished_total


def test_rebucketing_is_exact_and_refuses_foreign_bounds() -> None:
    from simulator.histogram import LATENCY_GRID, REQUEST_LATENCY_BUCKETS, Histogram

    h = Histogram(LATENCY_GRID)
    for v in (0.0002, 0.31, 0.31, 7.0, 9999.0):
        h.observe(v)
    coarse = h.rebucket(REQUEST_LATENCY_BUCKETS)
    assert coarse.cumulative()[0] == 1  # 0.0002 <= 0.3
    assert coarse.cumulative()[1] == 3  # the two 0.31 <= 0.5
    assert coarse.count == 5
    with pytest.raises(ValueError, match="grid"):
        h.rebucket((0.123,))


def test_every_engine_format_parses(snap: FleetSnapshot) -> None:
    for engine in ENGINES:
        assert _families(render_replica(snap.replicas[0], engine).decode())


def test_dcgm_page_matches_the_real_exporter(snap: FleetSnapshot, metrics_fixtures: Path) -> None:
    text = render_node("node-0", list(snap.gpus), "inference").decode()
    ours = _types(text)
    real = _types((metrics_fixtures / "dcgm__DataDog__integrations-core__metrics.txt").read_text())
    missing = set(ours) - set(real)
    assert missing <= {"DCGM_FI_PROF_PCIE_TX_BYTES"}  # every family we write is one the exporter writes
    assert {n: ours[n] for n in ours if n in real} == {n: real[n] for n in ours if n in real}
    fams = _families(text)
    xid = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert xid["1"] == 48
    assert xid["0"] == 0
    pods = {s.labels["gpu"]: s.labels.get("pod", "") for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert pods["0"] == snap.replicas[0].name
    assert pods["7"] == ""
    # The real exporter's labels; Kubernetes ones only where a pod holds the GPU.
    real_labels = _label_names((metrics_fixtures / "dcgm-mig-hostname__handwritten.txt").read_text())
    base = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
    for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples:
        held = any(g.pod for g in snap.gpus if str(g.index) == s.labels["gpu"])
        expected = base | ({"pod", "namespace", "container"} if held else set())
        assert set(s.labels) == expected
    assert {n.replace("Hostname", "hostname") for n in base | {"pod", "namespace", "container"}} <= real_labels[
        "DCGM_FI_DEV_GPU_UTIL"
    ]


def test_vanished_gpu_is_absent_from_its_exporter() -> None:
    f = Fleet(FleetConfig(replicas=1), load_trace("synthetic:duration_s=30"))
    f.inject(parse_fault({"type": "vanish_gpu", "node": "node-0", "gpu": 3}))
    fams = _families(render_node("node-0", f.snapshot().gpus, "ns").decode())
    assert {s.labels["gpu"] for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples} == {str(i) for i in range(8)} - {"3"}


def test_unknown_engine_is_refused(snap: FleetSnapshot) -> None:
    with pytest.raises(ValueError, match="unknown engine format"):
        render_replica(snap.replicas[0], "triton")
