"""target_down: engine targets and GPU exporters that stopped answering."""

from __future__ import annotations

from collector.samples import TargetInfo
from collector.state import FleetState
from detectors import target_down
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import gpu, replica


def test_cases():
    state = FleetState(stale_after_s=30)
    state.observe([replica("r0", 0), replica("r1", 0)], [gpu("n-gpu", 0)], now=0)
    # r0 keeps answering; r1's target fails; the GPU exporter on n-gpu goes silent (no page at all).
    for t in (5, 10):
        state.observe(
            [replica("r0", t)],
            [],
            now=t,
            down_targets=[TargetInfo(url="u", namespace="ml", pod="r1")],
            gpu_nodes_scraped=[],
        )
    found = {
        (f.subject.replica, f.subject.node, f.evidence["target"])
        for f in target_down.detect(state, thresholds=DEFAULT, now=10)
    }
    # a failing target is down at once (target_up False), even before its sample turns stale
    assert ("r1", "node-r1", "engine") in found
    # a healthy replica is not down
    assert not any(r == "r0" for r, _, _ in found)
    # the exporter is not yet down (10 s < down_after_s)
    assert not any(k == "gpu" for _, _, k in found)
    found = {f.evidence["target"] for f in target_down.detect(state, thresholds=DEFAULT, now=45)}
    # 45 s after its last page the GPU exporter is down
    assert "gpu" in found
