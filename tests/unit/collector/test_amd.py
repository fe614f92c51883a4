"""AMD GPU pages read into GpuSamples (collector/gpus/amd.py): AMD's device-metrics-exporter (DME) and amd_smi_exporter.

The real pages (ROCm/device-metrics-exporter issues #171, #259, #353, pull request #236; silogen/kaiwo's CPX lines)
are checked value by value in test_fixture_pages.py; here: what the reader decides (prefixes, partitions, sentinels,
units, node), that a page read off its layout reads the same, the stuck-GPU detector on AMD utilisation, and a fuzz.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES, adapt_page
from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache, MetricFamily, parse
from collector.exposition._page import LaidOutPage
from collector.gpus.amd import adapt_amd_smi, adapt_dme
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.thresholds import Thresholds
from tests.unit.detectors.detector_fleet import replica

MIB = 1024.0 * 1024.0
GPU_TARGET = TargetInfo(url="http://10.0.0.7:5000/metrics", kind="gpu")  # static: no node from discovery
_PREFIXED = "amd-dme-mi300x-amd-prefix-ecc-health__handwritten.txt"


def _labels(gpu: str = "0", partition: str = "NA", compute: str = "spx", memory: str = "nps1", **more: str) -> str:
    labels = {
        "card_series": "AMD Instinct MI300X OAM",
        "gpu_compute_partition_type": compute,
        "gpu_id": gpu,
        "gpu_memory_partition_type": memory,
        "gpu_partition_id": partition,
        "hostname": "node-7",
        **more,
    }
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _gpus(text: str, target: TargetInfo = GPU_TARGET) -> dict[str, GpuSample]:
    return {g.index: g for g in adapt_page(text, target, 1.0).gpus}


@pytest.mark.parametrize("prefix", ["", "amd_"])
def test_both_spellings_of_the_exporters_names_read_alike(prefix: str) -> None:
    page = (
        f"{prefix}gpu_gfx_activity{{{_labels()}}} 40\n{prefix}gpu_used_vram{{{_labels()}}} 1024\n"
        f"{prefix}gpu_junction_temperature{{{_labels()}}} 55\n{prefix}gpu_ecc_uncorrect_total{{{_labels()}}} 3\n"
    )
    (gpu,) = _gpus(page).values()
    assert (gpu.node, gpu.index, gpu.model_name) == ("node-7", "0", "AMD Instinct MI300X OAM")
    assert (gpu.utilisation, gpu.memory_used_bytes, gpu.temperature_c, gpu.ecc_dbe_volatile) == (
        0.4,
        1024 * MIB,
        55.0,
        3.0,
    )


def test_cpx_partitions_are_gpus_of_their_own() -> None:
    # a CPX MI300X: each partition its own gpu_id (as on silogen/kaiwo's page); two of them here
    page = "".join(
        f"gpu_gfx_activity{{{_labels(str(8 + p), str(p), 'cpx', 'nps4', gpu_uuid='u-shared')}}} {10 * p}\n"
        for p in range(2)
    )
    gpus = adapt_page(page, GPU_TARGET, 1.0).gpus
    assert [(g.index, g.mig_profile, g.mig_instance, g.utilisation) for g in gpus] == [
        ("8", "cpx/nps4", "0", 0.0),
        ("9", "cpx/nps4", "1", 0.1),
    ]
    assert len({g.key for g in gpus}) == 2  # the same UUID, told apart by the partition


def test_partitions_under_one_gpu_id_get_distinct_indexes() -> None:
    # no real page shows it, nothing forbids it: two partitions written under gpu_id 3
    page = "".join(f"gpu_gfx_activity{{{_labels('3', str(p), 'dpx', 'nps2')}}} 50\n" for p in range(2))
    assert sorted(_gpus(page)) == ["3/0", "3/1"]


def test_an_unpartitioned_gpu_carries_no_partition() -> None:
    (gpu,) = _gpus(f"gpu_gfx_activity{{{_labels(partition='0')}}} 5\n").values()  # SPX: partition id 0
    assert (gpu.mig_profile, gpu.mig_instance) == (None, None)


def test_discoverys_node_wins_and_the_exporter_pods_own_name_is_no_node() -> None:
    page = f"gpu_gfx_activity{{{_labels(hostname='dme-x7k2p')}}} 5\n"
    assert _gpus(page)["0"].node == "dme-x7k2p"  # static target: the label is all there is
    assert _gpus(page, replace(GPU_TARGET, node="gpu-node-3"))["0"].node == "gpu-node-3"
    assert _gpus(page, replace(GPU_TARGET, pod="dme-x7k2p", url="http://p/"))["0"].node == ""


@pytest.mark.parametrize(
    ("family", "value", "field"),
    [
        ("gpu_junction_temperature", "65535", "temperature_c"),  # uint16 "not available"
        ("gpu_junction_temperature", "4294967295", "temperature_c"),
        ("gpu_junction_temperature", "0", "temperature_c"),  # no sensor: 0 written
        ("gpu_power_usage", "0", "power_w"),
        ("gpu_power_usage", "1.8446744073709552e+19", "power_w"),  # uint64 "not available"
        ("gpu_gfx_activity", "65535", "utilisation"),
        ("gpu_gfx_activity", "NaN", "utilisation"),
        ("gpu_gfx_activity", "250", "utilisation"),  # beyond 100 %: collector.validity
        ("gpu_used_vram", "4294967295", "memory_used_bytes"),
        ("gpu_ecc_uncorrect_total", "2147483647", "ecc_dbe_volatile"),
        ("gpu_ecc_uncorrect_total", "-1", "ecc_dbe_volatile"),
    ],
)
def test_values_that_are_no_reading_stay_unknown(family: str, value: str, field: str) -> None:
    (gpu,) = _gpus(f"{family}{{{_labels()}}} {value}\n").values()
    assert getattr(gpu, field) is None


def test_real_zeros_and_big_memory_stay() -> None:
    # an idle GPU is at 0 %; 65535 MiB of VRAM is a real figure (a 64 GB MI210); no ECC error is 0 errors
    page = (
        f"gpu_gfx_activity{{{_labels()}}} 0\ngpu_used_vram{{{_labels()}}} 65535\n"
        f"gpu_ecc_uncorrect_total{{{_labels()}}} 0\n"
    )
    (gpu,) = _gpus(page).values()
    assert (gpu.utilisation, gpu.memory_used_bytes, gpu.ecc_dbe_volatile) == (0.0, 65535 * MIB, 0.0)


def test_edge_temperature_stands_in_only_where_junction_is_missing() -> None:
    page = (
        f"gpu_junction_temperature{{{_labels('0')}}} 0\ngpu_junction_temperature{{{_labels('1')}}} 71\n"
        f"gpu_edge_temperature{{{_labels('0')}}} 38\ngpu_edge_temperature{{{_labels('1')}}} 40\n"
    )
    gpus = _gpus(page)
    assert (gpus["0"].temperature_c, gpus["0"].extra) == (38.0, {"edge_temp_c": 38.0})  # junction 0: no reading
    assert (gpus["1"].temperature_c, gpus["1"].extra["junction_temp_c"]) == (71.0, 71.0)


def test_samples_without_a_gpu_id_belong_to_no_gpu() -> None:
    page = f'gpu_nodes_total{{hostname="node-7"}} 8\ngpu_gfx_activity{{{_labels()}}} 5\n'
    assert list(_gpus(page)) == ["0"]


@pytest.mark.parametrize(
    ("temperature", "power", "celsius", "watts"),
    [
        ("51000", "4.2e+07", 51.0, 42.0),  # ROCm SMI: millidegrees, microwatts
        ("51", "42", 51.0, 42.0),  # amd-smi's library: degrees, watts
        ("999", "99999", 999.0, 99999.0),  # just below the thresholds: as written (collector.validity bounds them)
    ],
)
def test_amd_smi_exporter_units(temperature: str, power: str, celsius: float, watts: float) -> None:
    page = (
        f'amd_gpu_current_temperature{{gpu_current_temperature="0",productname="MI210"}} {temperature}\n'
        f'amd_gpu_power{{gpu_power="0",productname="MI210"}} {power}\n'
    )
    (gpu,) = _gpus(page).values()
    assert (gpu.temperature_c, gpu.power_w, gpu.model_name) == (celsius, watts, "MI210")


def test_amd_smi_exporter_plain_gpu_label_and_old_power_name() -> None:
    page = '# TYPE amd_gpu_power_avg counter\namd_gpu_power_avg{gpu="1"} 150\namd_gpu_use_percent{gpu="1"} 37\n'
    (gpu,) = _gpus(page).values()
    assert (gpu.index, gpu.power_w, gpu.utilisation, gpu.node) == ("1", 150.0, 0.37, "")


def _laid_out(cache: LayoutCache, source: str, text: str) -> Mapping[str, MetricFamily]:
    return cache.parse(source, text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)


def test_a_page_read_off_its_layout_reads_its_own_values(metrics_fixtures: Path) -> None:
    first = (metrics_fixtures / _PREFIXED).read_text()
    second = (
        first.replace("} 97\n", "} 12\n")  # GPU 0 gfx activity
        .replace("} 4294967295\n", "} 66\n")  # GPU 1 junction: now a reading
        .replace("} 611\n", "} 65535\n")  # GPU 0 power usage: now "not available", package power stands in
    )
    cache = LayoutCache(parse)
    adapt_dme(_laid_out(cache, "t", first), GPU_TARGET, 1.0)
    families = _laid_out(cache, "t", second)
    assert isinstance(families, LaidOutPage)
    gpus = adapt_dme(families, GPU_TARGET, 2.0)
    assert gpus == adapt_dme(parse(second, wanted=WANTED_FAMILIES), GPU_TARGET, 2.0)
    by_index = {g.index: g for g in gpus}
    assert (by_index["0"].utilisation, by_index["0"].power_w, by_index["1"].temperature_c) == (0.12, 612.0, 66.0)


def test_amd_smi_read_off_its_layout(metrics_fixtures: Path) -> None:
    first = (metrics_fixtures / "amd-smi-exporter-two-mi210__handwritten.txt").read_text()
    second = first.replace('productname="AMD Instinct MI210"} 88\n', 'productname="AMD Instinct MI210"} 7\n')
    cache = LayoutCache(parse)
    adapt_amd_smi(_laid_out(cache, "s", first), GPU_TARGET, 1.0)
    families = _laid_out(cache, "s", second)
    assert isinstance(families, LaidOutPage)
    assert [g.utilisation for g in adapt_amd_smi(families, GPU_TARGET, 2.0)] == [0.0, 0.07]


def _replica(t: float, tokens: float) -> ReplicaSample:
    return replica("vllm-llama-0", t, namespace="llm", node="mi300x-node-1", generation_tokens=tokens)


def test_an_amd_gpu_pinned_busy_without_token_progress_is_a_hang(metrics_fixtures: Path) -> None:
    # GPU 0 serves pod llm/vllm-llama-0 (the exporter's pod labels) at 97 % gfx activity; the replica's tokens stand
    # still: the stuck-GPU detector's hang, read from AMD's utilisation exactly as from DCGM's
    gpus = adapt_page((metrics_fixtures / _PREFIXED).read_text(), GPU_TARGET, 1.0).gpus
    state = FleetState()
    state.observe([_replica(1.0, 500.0)], gpus, now=1.0)
    state.observe([_replica(6.0, 500.0)], [replace(g, timestamp=6.0) for g in gpus], now=6.0)
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=6.0)
    assert [(f.subject.gpu, f.evidence["condition"], f.action) for f in findings] == [("0", "hang", "drain_node")]


def test_amd_ecc_and_health_raise_no_xid_finding(metrics_fixtures: Path) -> None:
    # GPU 1: 2 uncorrectable ECC errors, the exporter's gpu_health 0. No XID is made up for AMD (docs/engines.md):
    # they are read and shown, and no finding comes of them on their own
    gpus = adapt_page((metrics_fixtures / _PREFIXED).read_text(), GPU_TARGET, 1.0).gpus
    gpu1 = next(g for g in gpus if g.index == "1")
    assert (gpu1.last_xid, gpu1.ecc_dbe_volatile, gpu1.extra["amd_health"]) == (None, 2.0, 0.0)
    state = FleetState()
    state.observe([], gpus, now=1.0)
    assert stuck_gpu.detect(state, thresholds=Thresholds(), now=1.0) == []


_VALUES = st.one_of(
    st.sampled_from(["0", "65535", "4294967295", "2147483647", "1.8446744073709552e+19", "NaN", "+Inf", "-1", "1e308"]),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False).map(repr),
)
_DME_NAMES = [
    "gpu_gfx_activity",
    "gpu_used_vram",
    "gpu_free_vram",
    "gpu_junction_temperature",
    "gpu_edge_temperature",
    "gpu_power_usage",
    "gpu_package_power",
    "gpu_ecc_uncorrect_total",
    "pcie_replay_count",
    "gpu_health",
    "gpu_voltage",
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "amd_"]),
            st.sampled_from(_DME_NAMES),
            st.sampled_from(["0", "1", "63"]),  # gpu_id
            st.sampled_from(["NA", "0", "1"]),  # gpu_partition_id
            st.sampled_from(["spx", "cpx", "none", ""]),
            _VALUES,
        ),
        max_size=25,
    )
)
def test_dme_fuzz_values_stay_possible_and_gpus_stay_apart(lines: list[tuple[str, str, str, str, str, str]]) -> None:
    series = {line[:5]: line[5] for line in reversed(lines)}  # a series written twice is no page: once, the first
    lines = [(*key, value) for key, value in series.items()]
    text = "".join(
        f"{prefix}{name}{{{_labels(gpu, partition, compute)}}} {value}\n"
        for prefix, name, gpu, partition, compute, value in lines
    )
    try:
        gpus = adapt_page(text, GPU_TARGET, 1.0).gpus
    except ValueError:  # a page of only unread names is an error that says what the page is
        assert all(name == "gpu_voltage" for _, name, *_ in lines)
        return
    keys = {
        (gpu, "" if partition == "NA" else partition)
        for _, name, gpu, partition, _, _ in lines
        if name != "gpu_voltage"
    }
    assert len(gpus) == len(keys)
    assert len({g.index for g in gpus}) == len(gpus) == len({g.key for g in gpus})
    for g in gpus:
        assert g.utilisation is None or 0.0 <= g.utilisation <= 1.0
        for value in (g.memory_used_bytes, g.memory_free_bytes, g.power_w, g.ecc_dbe_volatile, g.pcie_replay):
            assert value is None or (math.isfinite(value) and value >= 0)
        assert g.power_w is None or g.power_w > 0
        assert g.temperature_c is None or (math.isfinite(g.temperature_c) and g.temperature_c not in (0.0, 65535.0))
        assert g.last_xid is None


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["amd_gpu_use_percent", "amd_gpu_current_temperature", "amd_gpu_power", "amd_num_gpus"]),
            st.sampled_from(["0", "1", ""]),
            _VALUES,
        ),
        min_size=1,
        max_size=12,
    )
)
def test_amd_smi_fuzz(lines: list[tuple[str, str, str]]) -> None:
    lines = [(*key, value) for key, value in {line[:2]: line[2] for line in reversed(lines)}.items()]
    text = "".join(f'{name}{{{name.removeprefix("amd_")}="{gpu}"}} {value}\n' for name, gpu, value in lines)
    try:
        gpus = adapt_page(text, GPU_TARGET, 1.0).gpus
    except ValueError:
        return  # nothing read: said what the page is
    assert len(gpus) == len({gpu for name, gpu, _ in lines if gpu and name != "amd_num_gpus"})
    for g in gpus:
        assert g.utilisation is None or 0.0 <= g.utilisation <= 1.0
        assert g.power_w is None or (math.isfinite(g.power_w) and 0 < g.power_w < 100_000)
        assert g.temperature_c is None or (math.isfinite(g.temperature_c) and 0 < g.temperature_c < 1000)


def test_a_partition_reads_its_compute_cores_busy_share_before_gfx_activity() -> None:
    # DME's metric list: gfx activity "applicable for unpartitioned GPU"; gpu_gfx_busy_instantaneous per xcc_index
    # is what a partition has. Its cores' mean is the utilisation, and wins over gfx activity written beside it
    # (retired on partitions: the first partition's value, or amd-smi's 0 since v1.3.1; review G, session 17).
    cores = "".join(
        f'gpu_gfx_busy_instantaneous{{{_labels(str(gpu), "0", "dpx", "nps2")},xcc_index="{x}"}} {busy}\n'
        for gpu, x, busy in ((4, 0, 80), (4, 1, 100), (5, 0, 30), (5, 1, 65535))  # 65535: no reading
    )
    gpus = _gpus(cores + f"gpu_gfx_activity{{{_labels('5', '0', 'dpx', 'nps2')}}} 0\n")
    assert (gpus["4"].utilisation, gpus["5"].utilisation) == (0.9, 0.3)
    assert _gpus(cores)["5"].utilisation == 0.3
    only_gfx = _gpus(f"gpu_gfx_activity{{{_labels('5', '0', 'dpx', 'nps2')}}} 12\n")  # an exporter without cores
    assert only_gfx["5"].utilisation == 0.12
    # A whole GPU (SPX) keeps gfx activity, the engine's share over time, where both are written
    whole = _gpus(
        f'gpu_gfx_busy_instantaneous{{{_labels("6")},xcc_index="0"}} 20\ngpu_gfx_activity{{{_labels("6")}}} 97\n'
    )
    assert whole["6"].utilisation == 0.97
