"""GPU memory on the GPU health dashboard, from every GPU source kvpilot reads, under kvpilot's node names.

The "Framebuffer memory used" panel read dcgm-exporter's raw `DCGM_FI_DEV_FB_USED{Hostname=~"$node"}`: no job
selector, and `$node` holds kvpilot's node names (discovery's spec.nodeName first), while a dcgm-exporter run without
NODE_NAME writes its pod's name as Hostname, so the panel stayed empty; AMD GPUs never showed. kvpilot now exports
the framebuffer used and free of every GPU it reads (`kvpilot_gpu_memory_{used,free}_bytes`, by node and gpu like
`kvpilot_gpu_utilisation_ratio`), and the panel reads that through the mixin.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api import series as S  # noqa: N812  (the catalogue reads best as S.NAME)
from api.exposition import snapshot_families
from collector.adapt import adapt_page
from collector.samples import GpuSample, TargetInfo
from collector.state import FleetState
from dashboards.definitions import DASHBOARDS
from dashboards.mixin import CONFIG
from kvpilot.runtime.snapshot import Snapshot

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
MIB = 2**20
USED = "kvpilot_gpu_memory_used_bytes"
FREE = "kvpilot_gpu_memory_free_bytes"


def _exported(gpus: list[GpuSample]) -> dict[str, dict[tuple[str, str], float]]:
    state = FleetState()
    state.observe([], gpus, now=0.0)
    snap = Snapshot(tick=1, t=0.0, gpus=state.gpus())
    return {
        f.name: {(s.labels["node"], s.labels["gpu"]): s.value for s in f.samples}
        for f in snapshot_families(snap)
        if f.name in (USED, FREE)
    }


@pytest.mark.parametrize(
    ("page", "gpu", "used", "free"),
    [
        # a real dcgm-exporter page whose Hostname is its container's id (424773df46e0), not the node:
        # FB_USED 0 MiB, FB_FREE 15109 MiB (a Tesla T4)
        ("dcgm__DataDog__integrations-core__metrics.txt", "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", 0.0, 15109.0),
        # a real AMD device-metrics-exporter page: gpu_used_vram 26, no gpu_free_vram in this part (absent, not 0)
        ("amd-dme-radeon-no-card-model__ROCm__device-metrics-exporter__issue_259__excerpt.txt", "0", 26.0, None),
    ],
)
def test_every_gpu_source_exports_framebuffer_under_kvpilots_node(
    page: str, gpu: str, used: float, free: float | None
) -> None:
    target = TargetInfo(url="http://10.0.0.9:9400/metrics", kind="gpu", pod="gpu-exporter-x7k2p", node="gpu-node-3")
    gpus = adapt_page((PAGES / page).read_text(), target, 0.0).gpus
    exported = _exported(gpus)
    assert exported[USED] == {("gpu-node-3", gpu): used * MIB}
    assert exported.get(FREE, {}) == ({} if free is None else {("gpu-node-3", gpu): free * MIB})


def test_mig_instances_of_one_gpu_are_series_of_their_own() -> None:
    """MIG instances share their GPU's UUID: each GPU series names the instance too, or two instances' values would
    be one label set twice on kvpilot's page (Prometheus keeps one and counts the other a duplicate)."""
    page = (PAGES / "dcgm-mig-hostname__handwritten.txt").read_text()
    gpus = adapt_page(page, TargetInfo(url="http://10.0.0.9:9400/metrics", kind="gpu", node="gpu-node-3"), 0.0).gpus
    state = FleetState()
    state.observe([], gpus, now=0.0)
    families = [f for f in snapshot_families(Snapshot(tick=1, t=0.0, gpus=state.gpus())) if "_gpu_" in f.name]
    for family in families:
        label_sets = [tuple(sorted(s.labels.items())) for s in family.samples]
        assert len(label_sets) == len(set(label_sets)), family.name
    used = {s.labels["gpu"]: s.value for f in families if f.name == USED for s in f.samples}
    mig = [g for g in gpus if g.mig_instance is not None]
    assert len(mig) == 2
    assert {f"{g.uuid}/mig{g.mig_instance}": g.memory_used_bytes for g in mig}.items() <= used.items()


def test_a_gpu_whose_memory_is_unknown_exports_none() -> None:
    gpu = GpuSample(node="n0", index="0", uuid="GPU-0", model_name=None, timestamp=0.0, utilisation=0.5)
    assert _exported([gpu]) == {}


def test_the_panel_reads_kvpilots_gauge_through_the_mixin() -> None:
    (panel,) = [p for p in DASHBOARDS["gpu-health"]().panels() if p.title == "Framebuffer memory used"]
    assert [q.expr for q in panel.queries] == [CONFIG.read(S.GPU_MEMORY_USED, CONFIG.node_selector)]
    assert panel.unit == "bytes"


_SELECTED = re.compile(r"([A-Za-z_:][\w:]*)\{([^}]*)\}")


def test_every_gpu_health_panel_selects_kvpilots_series_with_its_job() -> None:
    """No panel of the GPU dashboard reads an exporter's raw series by hand: only kvpilot's own, with the job."""
    catalogue = {s.name for s in S.ALL}
    for panel in DASHBOARDS["gpu-health"]().panels():
        for q in panel.queries:
            selected = _SELECTED.findall(q.expr)
            assert selected, (panel.title, q.expr)
            for name, matchers in selected:
                assert name in catalogue, (panel.title, name)
                assert CONFIG.job_selector in matchers, (panel.title, q.expr)
