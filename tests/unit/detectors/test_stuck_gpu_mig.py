"""stuck_gpu on NVIDIA MIG, through real dcgm-exporter pages, the real FleetState and the real hysteresis.

MIG instances of one GPU share its UUID. dcgm-exporter lists each instance with its own graphics-engine activity
and pod, and repeats the GPU's device fields (the XID, temperature, clocks) under every instance (the A800 page:
three instances of GPU 0, each with the same XID, clocks and energy). So an XID or a GPU gone is the physical GPU's
(one finding on its UUID), a hang or an idle instance while requests run is the instance's (one finding each on
``<UUID>/mig<instance>``, as kvpilot's own GPU series name it): two instances never overwrite each other's finding
nor turn its labels over in turn, and the node's drain is one decision either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from api.exposition import snapshot_families
from collector.adapt import adapt_page
from collector.samples import GpuSample, ReplicaSample, TargetInfo
from detectors.drain_rails import DrainRails, Placement, decide
from detectors.finding import Finding
from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from kvpilot.runtime.snapshot import Snapshot
from tests.unit.detectors.detector_fleet import drive, replica

PAGES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
TARGET = TargetInfo(url="http://10.0.0.9:9400/metrics", kind="gpu")

H100 = "dcgm-h100-mig-driver-label__NVIDIA__dcgm-exporter__issue_512__excerpt.txt"
H100_UUID = "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"
EMBED = "text-embedding-predictor-00008-deployment-57946f6c67-vdtjl"  # on instance 7
TTS = "tts-predictor-00011-deployment-5554f75554-8j8pl"  # on instance 9 (instance 8 holds no pod)
A800 = "dcgm-a800-mig-prof__gpu-dcgm-exporter-blog__index-5731120479__trimmed.txt"
A800_UUID = "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"  # GPU 0: MIG instances 3, 5, 6 (2g.20gb)
MIXED = "dcgm-4x-mixed-models-mig__NVIDIA__dcgm-exporter__pull_736__excerpt.txt"


def _page(name: str) -> list[GpuSample]:
    return adapt_page((PAGES / name).read_text(), TARGET, 0.0).gpus


def _busy(source: str, value: float) -> dict[str, Any]:
    """An instance's activity as dcgm-exporter lists it for MIG (GR_ENGINE_ACTIVE per instance), or as a
    utilisation (an exporter build or NVML that gives one): the identity must not depend on which."""
    return {"extra": {"gr_engine_active": value}} if source == "gr_engine_active" else {"utilisation": value}


SOURCES = pytest.mark.parametrize("source", ["gr_engine_active", "utilisation"])


def _at(gpus: Sequence[GpuSample], t: float, **per_index: dict[str, Any]) -> list[GpuSample]:
    return [replace(g, timestamp=t, **per_index.get(g.index.replace("/", "_"), {})) for g in gpus]


def _pod(name: str, t: float, *, stuck: bool, node: str = "gsrh100-074", ns: str = "model-playground-stg") -> Any:
    # 4 requests running; tokens frozen when stuck, else 100 a tick
    tokens = 500.0 if stuck else 100.0 * t
    return replace(replica(name, t, node=node, generation_tokens=tokens), namespace=ns, deployment=name.split("-")[0])


def _run(tick: Any, ticks: int) -> list[list[Finding]]:
    det = Detection(DEFAULT, only=["stuck_gpu"])
    active: list[list[Finding]] = []
    drive(tick, ticks, each=lambda s, t: active.append(det.tick(s, now=t).active))
    return active


@SOURCES
def test_two_idle_instances_of_one_gpu_are_two_findings_each_naming_its_replica(source: str) -> None:
    # The real H100 page: instances 7 and 9 each serve a pod, both idle (GR_ENGINE_ACTIVE 0, the page's value: no
    # GPU_UTIL is listed for MIG) while their requests make no progress. Each replica needs its own restart; on
    # c7f6298 both were one finding on the shared UUID, so one replica's restart was lost.
    page = _page(H100)

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        idle = _busy(source, 0.0)
        return [_pod(EMBED, t, stuck=i >= 2), _pod(TTS, t, stuck=i >= 2)], _at(page, t, **{"0_7": idle, "0_9": idle})

    last = _run(tick, 8)[-1]
    assert sorted((f.subject.gpu, f.evidence["replica"], f.action, f.evidence["condition"]) for f in last) == [
        (f"{H100_UUID}/mig7", EMBED, "restart_workload", "idle_while_running"),
        (f"{H100_UUID}/mig9", TTS, "restart_workload", "idle_while_running"),
    ]
    assert all(f.evidence["physical_gpu"] == H100_UUID and f.evidence["utilisation"] == 0.0 for f in last)


@SOURCES
def test_one_instance_hanging_neither_overwrites_nor_flaps_its_sibling_finding(source: str) -> None:
    # Instance 7's replica is stuck idle throughout; instance 9 hangs (pinned busy, no progress) for four ticks and
    # recovers. Instance 7's finding must stay open with the same labels every tick (an alert on it neither resolves
    # nor re-fires); on c7f6298 the one shared finding turned critical and named TTS, then back.
    page = _page(H100)

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        hang = 6 <= i < 10
        gpus = _at(page, t, **{"0_7": _busy(source, 0.0), "0_9": _busy(source, 1.0 if hang else 0.0)})
        return [_pod(EMBED, t, stuck=i >= 2), _pod(TTS, t, stuck=hang)], gpus

    ticks = _run(tick, 16)
    embed = [[f for f in active if f.alert_labels()["replica"] == EMBED] for active in ticks]
    opened = next(i for i, found in enumerate(embed) if found)
    assert all(len(found) == 1 for found in embed[opened:])
    assert {(found[0].id, found[0].severity, tuple(found[0].alert_labels().items())) for found in embed[opened:]} == {
        (embed[-1][0].id, embed[-1][0].severity, tuple(embed[-1][0].alert_labels().items()))
    }
    assert embed[-1][0].alert_labels()["gpu"] == f"{H100_UUID}/mig7"
    hung = [f for active in ticks[7:10] for f in active if f.evidence["condition"] == "hang"]
    assert {(f.subject.gpu, f.evidence["replica"], f.action) for f in hung} == {
        (f"{H100_UUID}/mig9", TTS, "drain_node")
    }


def test_an_xid_every_instance_repeats_is_one_finding_on_the_physical_gpu_and_one_drain() -> None:
    # The real A800 page: dcgm-exporter repeats GPU 0's XID under each of its instances 3, 5 and 6. XID 79 (fell off
    # the bus: drain class) is the GPU's: one finding on its UUID, not three, and the node is one drain decision.
    page = _page(A800)
    xid = {"last_xid": 79}

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        return [], _at(page, t, **({"0_3": xid, "0_5": xid, "0_6": xid} if i >= 2 else {}))

    last = _run(tick, 6)[-1]
    (f,) = last
    assert (f.subject.node, f.subject.gpu, f.action, f.evidence["condition"]) == (
        "msxf-hpc-64-35-ai",
        A800_UUID,
        "drain_node",
        "xid",
    )
    placements = [Placement("other/x", "x-0", "elsewhere", True)]
    (d,) = decide(
        last, nodes={"msxf-hpc-64-35-ai", "elsewhere"}, placements=placements, rails=DrainRails(breaker_share=1)
    )
    assert (d.node, d.finding_ids) == ("msxf-hpc-64-35-ai", (f.id,))


@SOURCES
def test_an_xid_and_an_instance_hang_are_two_findings_and_still_one_drain_of_the_node(source: str) -> None:
    # GPU 0's GSP XID 119 (isolated: watch) with its instance 3 hung: the hang is instance 3's (drain), the XID the
    # GPU's, escalated to drain because an instance of it is wedged. The node is one drain decision for both.
    page = _page(A800)
    xid = {"last_xid": 119}

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        pod = _pod("vllm-a-0", t, stuck=i >= 2, node="msxf-hpc-64-35-ai", ns="ml")
        hot = {"0_3": {**xid, "pod": "vllm-a-0", "namespace": "ml", **_busy(source, 0.99)}}
        return [pod], _at(page, t, **({**hot, "0_5": xid, "0_6": xid} if i >= 2 else {}))

    last = _run(tick, 8)[-1]
    assert sorted((f.subject.gpu, f.evidence["condition"], f.action) for f in last) == [
        (A800_UUID, "xid", "drain_node"),
        (f"{A800_UUID}/mig3", "hang", "drain_node"),
    ]
    physical = next(f for f in last if f.subject.gpu == A800_UUID)
    assert "GPU 0 on msxf-hpc-64-35-ai (MIG, 3 instance(s)): XID 119 (GSP) with the GPU wedged" in physical.summary
    assert physical.evidence["mig_instances"] == "3,5,6"
    assert physical.evidence["replica"] == "vllm-a-0"  # the one replica its instances serve
    decisions = decide(last, nodes={"msxf-hpc-64-35-ai", "b"}, placements=[], rails=DrainRails(breaker_share=1))
    assert [(d.node, d.finding_ids) for d in decisions] == [("msxf-hpc-64-35-ai", tuple(sorted(f.id for f in last)))]


def test_a_mig_gpu_gone_from_its_exporter_is_one_vanished_finding_on_its_uuid() -> None:
    # Every instance of A800 GPU 0 leaves the page while the exporter still answers with GPUs 1-7.
    page = _page(A800)

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        return [], [g for g in _at(page, t) if i < 2 or g.mig_instance is None]

    (f,) = _run(tick, 6)[-1]
    assert (f.subject.gpu, f.evidence["condition"], f.action) == (A800_UUID, "vanished", "drain_node")


def test_a_whole_gpu_keeps_its_identity_beside_a_mig_gpu_on_one_page() -> None:
    # The real mixed page: an RTX 2000 Ada not partitioned (GPU 1) and an A30 instance 3 (GPU 2) serving Triton.
    # An XID on each: the whole GPU's finding is on its UUID as before; the A30's is on its UUID and names the one
    # replica its instances serve.
    page = _page(MIXED)
    node = page[0].node

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        triton = _pod("triton-server-f7cb5d77-95xcf", t, stuck=False, node=node, ns="default")
        return [triton], _at(page, t, **({"1": {"last_xid": 79}, "2_3": {"last_xid": 13}} if i >= 2 else {}))

    last = _run(tick, 6)[-1]
    assert sorted((f.subject.gpu, f.action, f.evidence["replica"]) for f in last) == [
        ("GPU-63bc0b91-2265-1b94-831c-15c41fe92675", "restart_workload", "triton-server-f7cb5d77-95xcf"),
        ("GPU-fc60126e-514d-3522-2828-c5daa8e99d85", "drain_node", None),
    ]


def test_two_instances_findings_are_two_finding_series_named_as_kvpilots_gpu_series() -> None:
    # On kvpilot's page: one kvpilot_finding_active series per instance's finding, its gpu label the instance's
    # kvpilot_gpu_utilisation_ratio label (b196094), so an alert joins the instance it names.
    page = _page(H100)
    states: list[Any] = []

    def tick(i: int, t: float) -> tuple[list[ReplicaSample], list[GpuSample]]:
        idle = {"utilisation": 0.0}
        return [_pod(EMBED, t, stuck=i >= 2), _pod(TTS, t, stuck=i >= 2)], _at(page, t, **{"0_7": idle, "0_9": idle})

    det = Detection(DEFAULT, only=["stuck_gpu"])
    drive(tick, 8, each=lambda s, t: states.append((s.gpus(), det.tick(s, now=t).active)))
    gpus, findings = states[-1]
    families = {f.name: f for f in snapshot_families(Snapshot(tick=8, t=35.0, gpus=gpus, findings=findings))}
    active = [s.labels for s in families["kvpilot_finding_active"].samples]
    assert len({tuple(sorted(labels.items())) for labels in active}) == len(active) == 2
    util = {s.labels["gpu"] for s in families["kvpilot_gpu_utilisation_ratio"].samples}
    assert {labels["gpu"] for labels in active} == {f"{H100_UUID}/mig7", f"{H100_UUID}/mig9"} <= util
