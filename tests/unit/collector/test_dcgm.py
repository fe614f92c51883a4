"""dcgm-exporter adapter: the real DataDog page, the hand-written MIG/hostname page, sentinels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES, adapt_page
from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache, MetricFamily, parse
from collector.exposition._page import LaidOutPage
from collector.gpus.dcgm import adapt_dcgm, is_blank
from collector.samples import GpuSample, TargetInfo
from collector.state import FleetState
from detectors import stuck_gpu
from detectors.drain_rails import decide
from detectors.thresholds import Thresholds

MIB = 1024 * 1024
# a static target: discovery gives no node, so the page's hostname label is read (see test_node_label_variants)
GPU_TARGET = TargetInfo(url="http://dcgm:9400/metrics", kind="gpu")


def _page(metrics_fixtures: Path, name: str) -> list[GpuSample]:
    page = adapt_page((metrics_fixtures / name).read_text(), GPU_TARGET, 7.0)
    assert page.replicas == []
    assert page.engine is None
    return page.gpus


def _gpus(metrics_fixtures: Path, name: str) -> dict[str, GpuSample]:
    return {g.key: g for g in _page(metrics_fixtures, name)}


def test_datadog_page_one_sample_per_host_and_uuid(metrics_fixtures: Path) -> None:
    gpus = _gpus(metrics_fixtures, "dcgm__DataDog__integrations-core__metrics.txt")
    # three labelled GPU identities; the unlabelled "dummy" lines cannot be attributed and are skipped
    assert sorted(gpus) == [
        "424773df46e0/GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
        "551bdf382151/GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5",
        "ip-11111/GPU-abc",
    ]
    t4 = gpus["424773df46e0/GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert (t4.node, t4.index, t4.model_name, t4.timestamp) == ("424773df46e0", "0", "Tesla T4", 7.0)
    assert (t4.temperature_c, t4.power_w, t4.utilisation) == (25.0, 8.969, 0.0)
    assert (t4.memory_free_bytes, t4.memory_used_bytes) == (15109 * MIB, 0.0)
    assert (t4.last_xid, t4.pcie_replay, t4.xid_count) == (0, 0.0, None)
    assert (t4.extra["sm_clock_mhz"], t4.extra["mem_clock_mhz"], t4.extra["energy_mj"]) == (300.0, 405.0, 128996013.0)
    assert t4.remapped_rows_uncorrectable is None  # only on an unlabelled dummy line
    t4b = gpus["551bdf382151/GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5"]
    assert (t4b.extra["clock_event_reasons"], t4b.extra["memory_reserved_mib"], t4b.utilisation) == (1.0, 15109.0, None)
    a10 = gpus["ip-11111/GPU-abc"]
    assert (a10.model_name, a10.pod, a10.namespace, a10.container) == (
        "NVIDIA A10G",
        "ray-1111111",
        "ray-llm",
        "ray-worker",
    )
    assert a10.extra == {"dram_active": 0.000003}


def test_handwritten_mig_hostname_sentinels(metrics_fixtures: Path) -> None:
    gpus = _page(metrics_fixtures, "dcgm-mig-hostname__handwritten.txt")
    by_index = {g.index: g for g in gpus}
    # MIG instances share their parent's UUID: they are told apart by index "gpu/instance"
    assert [g.index for g in gpus] == ["0", "1", "2/1", "2/2"]
    assert {g.node for g in gpus} == {"gpu-node-7"}  # no node from discovery: the lowercase hostname label
    h100 = by_index["0"]
    assert (h100.pod, h100.namespace, h100.container) == ("llama-8b-6d9f7c-x2k4p", "inference", "vllm")
    assert (h100.utilisation, h100.sm_active, h100.temperature_c, h100.power_w) == (0.87, 0.71, 64.0, 512.3)
    assert (h100.memory_used_bytes, h100.memory_free_bytes) == (71234 * MIB, 9682 * MIB)
    assert (h100.last_xid, h100.xid_count, h100.pcie_replay) == (79, 3.0, 3.0)
    assert (h100.remapped_rows_correctable, h100.remapped_rows_uncorrectable, h100.row_remap_failure) == (
        2.0,
        1.0,
        False,
    )
    assert (h100.extra["gr_engine_active"], h100.extra["tensor_active"]) == (0.912345, 0.4312)
    idle = by_index["1"]
    assert (idle.sm_active, idle.last_xid, idle.pod, idle.xid_count) == (None, 0, None, None)  # int64 sentinel
    mig1, mig2 = by_index["2/1"], by_index["2/2"]
    assert (mig1.mig_profile, mig1.mig_instance, mig1.uuid) == (
        "3g.40gb",
        "1",
        "GPU-9d2e4f60-7a1b-4c3d-8e5f-6a7b8c9d0e1f",
    )
    assert (mig1.utilisation, mig1.memory_used_bytes, mig1.pod) == (None, 20480 * MIB, "qwen-7b-5c8d9b-m7q2z")
    assert (mig2.last_xid, mig2.pod, mig2.memory_used_bytes) == (13, None, 512 * MIB)  # err_code when value is blank


def test_time_sliced_gpus_fanned_out_per_container_count_each_xid_once(metrics_fixtures: Path) -> None:
    gpus = _page(metrics_fixtures, "dcgm-virtual-gpus__handwritten.txt")
    # one GPU each, not one per container copy of its series
    assert [(g.node, g.index) for g in gpus] == [("gpu-node-3", "0"), ("gpu-node-3", "1")]
    shared, single = gpus
    # the copies carry the same values: the first copy's are the GPU's (and its first user's pod)
    assert (shared.utilisation, shared.memory_used_bytes, shared.last_xid) == (0.93, 72723 * MIB, 119)
    assert shared.pod == "qwen-7b-6f8d9c-k2m4n"
    # XID 119 once in the window, written once per container using the GPU: 1, not 2 (which would make a lone GSP
    # timeout look recurring and the XID triage drain the node)
    assert shared.xid_count == 1.0
    assert (single.utilisation, single.last_xid, single.xid_count) == (0.41, 0, 0.0)


@pytest.mark.parametrize(
    ("value", "blank"),
    [
        (9223372036854775794.0, True),  # DCGM_INT64 not-supported
        (9.3e18, True),  # anywhere above the int64 blank band
        (2147483632.0, True),  # DCGM_INT32_BLANK
        (2147483634.0, True),  # DCGM_INT32 not-supported
        (140737488355328.0, True),  # DCGM_FP64_BLANK
        (float("nan"), True),  # not a number is no value
        (2147483631.0, False),  # just below the int32 band: a real (large) counter
        (0.0, False),  # zero is a value
        (128996013.0, False),  # ordinary energy counter
    ],
)
def test_is_blank(value: float, blank: bool) -> None:
    assert is_blank(value) is blank


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("2147483631", 2147483631.0),  # just below the smallest sentinel: a value
        ("2147483632", None),  # DCGM_INT32_BLANK
        ("140737488355328", None),  # DCGM_FP64_BLANK
        ("NaN", None),
        ("-Inf", None),
        ("+Inf", None),
        ("-5", -5.0),
        ("0", 0.0),
    ],
)
def test_a_value_is_read_unless_blank_on_a_parsed_page_and_off_a_layout(value: str, read: float | None) -> None:
    # adapt_dcgm tests a value below the smallest sentinel before it calls is_blank: both ways give is_blank's answer
    page = '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-0"}} {}\n'
    cache = LayoutCache(parse)
    _laid_out(cache, "t", page.format(1))
    families = _laid_out(cache, "t", page.format(value))
    assert isinstance(families, LaidOutPage)
    (laid_out,) = adapt_dcgm(families, GPU_TARGET, 1.0)
    (parsed,) = adapt_dcgm(parse(page.format(value)), GPU_TARGET, 1.0)
    assert laid_out.temperature_c == parsed.temperature_c == read


EXPORTER_POD = "dcgm-exporter-x7k2p"


@pytest.mark.parametrize(
    ("labels", "target_node", "node"),
    [
        # no node from discovery (a static target, a saved page): older exporters' capital Hostname
        ('gpu="0",UUID="GPU-x",Hostname="h-old"', "", "h-old"),
        # ... the newest exporters' lowercase hostname
        ('gpu="0",UUID="GPU-x",hostname="h-new"', "", "h-new"),
        # neither label: the discovered node
        ('gpu="0",UUID="GPU-x"', "gpu-node-7", "gpu-node-7"),
        # discovery's node (the exporter pod's spec.nodeName) wins over the label, which is the NODE_NAME the Helm
        # chart sets from that same field, or else the pod's own hostname ...
        (f'gpu="0",UUID="GPU-x",Hostname="{EXPORTER_POD}"', "gpu-node-7", "gpu-node-7"),
        # ... or the host engine's address under --remote-hostengine-info
        ('gpu="0",UUID="GPU-x",Hostname="10.0.1.23"', "gpu-node-7", "gpu-node-7"),
        ('gpu="0",UUID="GPU-x",Hostname="gpu-node-7"', "gpu-node-7", "gpu-node-7"),
        # no node from discovery and the label is the exporter pod's own name (NODE_NAME unset): unknown, not the pod
        (f'gpu="0",UUID="GPU-x",Hostname="{EXPORTER_POD}"', "", ""),
    ],
)
def test_node_label_variants(labels: str, target_node: str, node: str) -> None:
    families = parse(f"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{{labels}}} 40\n")
    target = replace(GPU_TARGET, node=target_node, pod=EXPORTER_POD)
    (gpu,) = adapt_dcgm(families, target, 1.0)
    assert (gpu.node, gpu.temperature_c) == (node, 40.0)


def _laid_out(cache: LayoutCache, source: str, text: str) -> Mapping[str, MetricFamily]:
    return cache.parse(source, text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)


def test_a_page_read_off_its_layout_is_adapted_from_its_own_values(metrics_fixtures: Path) -> None:
    # The adapter plans per layout (which GPU each sample feeds); blanks and XIDs are still read per page: a
    # value blank on the first page and real on the next (and the reverse) comes out as on a freshly parsed page.
    first = (metrics_fixtures / "dcgm-mig-hostname__handwritten.txt").read_text()
    moved = [
        ('pod="llama-8b-6d9f7c-x2k4p"} 87\n', 'pod="llama-8b-6d9f7c-x2k4p"} 2147483632\n'),  # GPU 0: now blank
        ('pod="qwen-7b-5c8d9b-m7q2z"} 2147483632\n', 'pod="qwen-7b-5c8d9b-m7q2z"} 33\n'),  # MIG 2/1: now a value
        ('err_msg="Graphics Engine Exception"} 9223372036854775794', 'err_msg="Graphics Engine Exception"} 43'),
        ('DCGM_FI_DRIVER_VERSION="550.90.07"} 9223372036854775794', 'DCGM_FI_DRIVER_VERSION="550.90.07"} 0.5'),
    ]
    second = first
    for old, new in moved:
        assert second.count(old) == 1
        second = second.replace(old, new)
    cache = LayoutCache(parse)
    adapt_dcgm(_laid_out(cache, "t", first), GPU_TARGET, 1.0)
    families = _laid_out(cache, "t", second)
    assert isinstance(families, LaidOutPage)  # read off the first page's layout, not parsed
    gpus = adapt_dcgm(families, GPU_TARGET, 2.0)
    assert gpus == adapt_dcgm(parse(second, wanted=WANTED_FAMILIES), GPU_TARGET, 2.0)
    by_index = {g.index: g for g in gpus}
    assert (by_index["0"].utilisation, by_index["2/1"].utilisation) == (None, 0.33)
    assert (by_index["2/2"].last_xid, by_index["1"].sm_active) == (43, 0.5)


def test_targets_sharing_a_layout_keep_their_own_node(metrics_fixtures: Path) -> None:
    # a page without a hostname label: its GPUs are on the target's node, though the plan is per layout
    page = "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" + "".join(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}",UUID="GPU-{i}"}} {40 + i}\n' for i in range(2)
    )
    cache = LayoutCache(parse)
    nodes = []
    for node in ("node-a", "node-b", "node-a"):
        families = _laid_out(cache, node, page)
        nodes.append([g.node for g in adapt_dcgm(families, replace(GPU_TARGET, node=node), 1.0)])
    assert isinstance(families, LaidOutPage)
    assert nodes == [["node-a"] * 2, ["node-b"] * 2, ["node-a"] * 2]


def test_a_laid_out_page_is_adapted_from_its_values_without_building_samples(
    metrics_fixtures: Path, samples_built: list[object]
) -> None:
    # the plan (GPUs, XID err_code labels) is worked out per layout; each page after is read by position, and a page
    # whose XID value is blank still takes the XID from its err_code label, as a parsed page does

    built = samples_built
    text = (metrics_fixtures / "dcgm-mig-hostname__handwritten.txt").read_text()
    cache = LayoutCache(parse)
    for xid in ("79", "43", "31"):  # the first page is parsed and planned by; the others are read by the plan
        built.clear()
        page = text.replace(" 79\n", f" {xid}\n", 1)  # GPU 0's last XID moves
        families = _laid_out(cache, "t", page)
        gpus = adapt_dcgm(families, GPU_TARGET, 1.0)
    assert isinstance(families, LaidOutPage)
    assert built == []
    assert gpus == adapt_dcgm(parse(page, wanted=WANTED_FAMILIES), GPU_TARGET, 1.0)
    by_index = {g.index: g for g in gpus}
    assert (by_index["0"].last_xid, by_index["2/2"].last_xid) == (31, 13)  # 2/2's value is blank: its err_code


@pytest.mark.parametrize("zero", ["0", "-0", "0.0", "0e5"])
@pytest.mark.parametrize("err_code", ['err_code="79",', ""])
def test_an_xid_value_of_zero_takes_its_err_code_else_zero(metrics_fixtures: Path, zero: str, err_code: str) -> None:
    # no XID in the value (what nearly every page says): the err_code label's, and 0 where there is none; parsed and
    # off the layout alike
    text = (metrics_fixtures / "dcgm-mig-hostname__handwritten.txt").read_text()
    if not err_code:
        text = text.replace('err_code="79",', "")
    cache = LayoutCache(parse)
    for value in ("79", zero):
        page = text.replace(" 79\n", f" {value}\n", 1)  # GPU 0's XID value
        gpus = {g.index: g for g in adapt_dcgm(_laid_out(cache, "t", page), GPU_TARGET, 1.0)}
        assert gpus == {g.index: g for g in adapt_dcgm(parse(page, wanted=WANTED_FAMILIES), GPU_TARGET, 1.0)}
    assert cache.hits == 1
    assert gpus["0"].last_xid == (79 if err_code else 0)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6),  # containers sharing GPU 0, each written its copy of every series
    st.dictionaries(st.sampled_from(["13", "31", "79", "119"]), st.integers(1, 5), max_size=3),  # XIDs in the window
)
def test_xids_of_a_shared_gpu_are_counted_once_however_many_use_it(users: int, xids: dict[str, int]) -> None:
    lines = ["# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge"]
    for n in range(users):
        labels = f'gpu="0",UUID="GPU-1",Hostname="h",pod="p{n}",namespace="ns",container="c",vgpu="{n}"'
        lines += [f'DCGM_EXP_XID_ERRORS_COUNT{{{labels},xid="{xid}"}} {count}' for xid, count in xids.items()]
        lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 60")
    gpus = adapt_page("\n".join(lines) + "\n", GPU_TARGET, 0.0).gpus
    assert len(gpus) == 1
    assert gpus[0].xid_count == (float(sum(xids.values())) if xids else None)


_POD_HOSTNAME = "dcgm-pod-hostname__handwritten.txt"  # Hostname="dcgm-exporter-x7k2p": NODE_NAME unset


def _drains(gpus: list[GpuSample]) -> list[tuple[str, str]]:
    """(node, finding) for each drain the GPU findings would ask for, through the detector and the drain rails."""
    state = FleetState()
    state.observe([], gpus, now=10.0)
    findings = stuck_gpu.detect(state, thresholds=Thresholds(), now=10.0)
    decisions = decide(findings, nodes={g.node for g in gpus}, placements=[])
    return [(d.node, d.reason) for d in decisions]


def test_an_exporter_naming_itself_by_its_pod_drains_discoverys_node(metrics_fixtures: Path) -> None:
    # NODE_NAME unset: every GPU's Hostname is the exporter pod's name. Discovery knows the pod's node, and that is
    # the node GPU 1's XID 79 (fallen off the bus) asks to drain
    text = (metrics_fixtures / _POD_HOSTNAME).read_text()
    discovered = TargetInfo(url="http://10.0.4.9:9400/metrics", kind="gpu", pod=EXPORTER_POD, node="gpu-node-4")
    gpus = adapt_page(text, discovered, 10.0).gpus
    assert [(g.node, g.index, g.last_xid) for g in gpus] == [("gpu-node-4", "0", 0), ("gpu-node-4", "1", 79)]
    ((node, reason),) = _drains(gpus)
    assert node == "gpu-node-4"
    assert EXPORTER_POD not in reason


def test_an_exporter_naming_itself_by_its_pod_names_no_node_when_discovery_has_none(metrics_fixtures: Path) -> None:
    # the exporter pod is known but not its node: the label is the pod's own name, so the node is unknown and the
    # XID finding asks to drain nothing (a drain needs a node); before, the pod's name was taken for the node
    text = (metrics_fixtures / _POD_HOSTNAME).read_text()
    target = TargetInfo(url="http://10.0.4.9:9400/metrics", kind="gpu", pod=EXPORTER_POD)
    gpus = adapt_page(text, target, 10.0).gpus
    assert [g.node for g in gpus] == ["", ""]
    assert _drains(gpus) == []


A800 = "dcgm-a800-mig-prof__gpu-dcgm-exporter-blog__index-5731120479__trimmed.txt"
# dcgm-exporter 3.x writes a field it cannot render as text as this, verbatim on the A800 page above (cut from the
# fixture: prometheus_client, and so the differential tests, refuse such a page whole)
_UNRENDERABLE = (
    "# HELP DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION vGPU Per Process Utilization\n"
    "# TYPE DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION gauge\n"
    'DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION{gpu="1",UUID="GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6",'
    'device="nvidia1",modelName="NVIDIA A800-SXM4-80GB",Hostname="msxf-hpc-64-35-ai",'
    'DCGM_FI_DRIVER_VERSION="535.129.03",DCGM_FI_PROCESS_NAME="/usr/bin/dcgm-exporter"} '
    "ERROR - FAILED TO CONVERT TO STRING\n"
)


def test_a_field_the_exporter_cannot_render_does_not_lose_the_page(metrics_fixtures: Path) -> None:
    text = (metrics_fixtures / A800).read_text()
    before = _page(metrics_fixtures, A800)
    after = adapt_page(text + _UNRENDERABLE, GPU_TARGET, 7.0).gpus
    assert len(after) == 10  # seven whole A800s and GPU 0's three MIG instances
    assert [replace(g, timestamp=0.0) for g in after] == [replace(g, timestamp=0.0) for g in before]
