"""stuck_gpu through the real FleetState and the real hysteresis: what opens, how fast, and what never drains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from detectors.registry import Detection
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import drive, gpu, replica

# A healthy replica on node-r0 making 100 tokens per tick on one GPU at 70 %.
HEALTHY_TICKS = 6


def _scenario(
    fault_from: int,
    *,
    gpu_kw: dict[str, Any] | None = None,
    progress: bool = True,
    vanish: bool = False,
    run: float = 4,
) -> Callable[[int, float], tuple[list[Any], list[Any]]]:
    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        faulty = i >= fault_from
        tokens = 100.0 * (i if not faulty or progress else fault_from - 1)  # frozen from the fault on
        r = replica("r0", t, generation_tokens=tokens, requests_running=run)
        gpus = [gpu("node-r0", t, index="1")]
        if not (faulty and vanish):
            gpus.append(gpu("node-r0", t, index="0", **(gpu_kw if faulty else {}) or {}))
        return [r], gpus

    return tick


def _opened_at(tick: Callable[[int, float], Any], ticks: int = 12) -> tuple[int | None, list[Any]]:
    det = Detection(DEFAULT, only=["stuck_gpu"])
    first: list[int] = []
    active: list[Any] = []

    def each(state: Any, t: float) -> None:
        tr = det.tick(state, now=t)
        if tr.active and not first:
            first.append(int(t // 5))
        active[:] = tr.active

    drive(tick, ticks, each=each)
    return (first[0] if first else None), active


CASES = [
    # drain-class XID 79 is flagged within 2 ticks, as a critical drain_node finding
    (dict(gpu_kw={"last_xid": 79}), "drain_node", "critical", "xid"),
    # NVML recovery action 4 (drain and reset) behind XID 154 drains
    (dict(gpu_kw={"last_xid": 154, "recovery_action": 4}), "drain_node", "critical", "xid"),
    # a GPU pinned at 100 % while its replica produces no tokens is a hang, flagged within 2 ticks
    (dict(gpu_kw={"utilisation": 1.0}, progress=False), "drain_node", "critical", "hang"),
    # a GPU idle while requests run without progress: restart the workload, do not drain
    (dict(gpu_kw={"utilisation": 0.0}, progress=False), "restart_workload", "warning", "idle_while_running"),
    # a GPU that vanished from an exporter that still answers: drain
    (dict(vanish=True), "drain_node", "critical", "vanished"),
    # an application XID restarts the workload and never drains
    (dict(gpu_kw={"last_xid": 13}), "restart_workload", "info", "xid"),
    # watch class: reset at the next idle window
    (dict(gpu_kw={"last_xid": 63}), "reset_gpu", "warning", "xid"),
]


@pytest.mark.parametrize(("kw", "action", "severity", "condition"), CASES)
def test_fault_opens_within_two_ticks(kw, action, severity, condition):
    fault_from = HEALTHY_TICKS
    opened, active = _opened_at(_scenario(fault_from, **kw))
    assert opened is not None
    assert opened - fault_from <= 1
    (f,) = active
    assert (f.action, str(f.severity), f.evidence["condition"]) == (action, severity, condition)
    assert f.subject.node == "node-r0"
    assert f.subject.gpu == "GPU-node-r0-0"


SILENT = [
    # a healthy GPU making progress
    dict(),
    # pinned at 100 % but tokens keep flowing: busy, not hung
    dict(gpu_kw={"utilisation": 1.0}),
    # no progress but no requests running: an idle replica, not a hang
    dict(gpu_kw={"utilisation": 1.0}, progress=False, run=0),
    # XID 0 is dcgm's "none"
    dict(gpu_kw={"last_xid": 0}),
]


@pytest.mark.parametrize("kw", SILENT)
def test_healthy_or_ambiguous_gpus_stay_silent(kw):
    opened, _ = _opened_at(_scenario(HEALTHY_TICKS, **kw))
    assert opened is None


def test_identity_is_stable_when_the_replica_moves():
    # The finding's id depends on node and GPU only, so a pod rescheduled elsewhere does not fork it.
    det = Detection(DEFAULT, only=["stuck_gpu"])
    ids = []

    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        name = "r0" if i < 3 else "r0-new"
        return [replica(name, t, node="node-r0", generation_tokens=100.0 * i)], [gpu("node-r0", t, last_xid=79)]

    drive(tick, 6, each=lambda s, t: ids.extend(f.id for f in det.tick(s, now=t).active))
    assert len(set(ids)) == 1


def test_long_prefill_without_decoded_tokens_is_not_a_hang():
    # Pinned GPU, requests running, no decoded token, but prompt tokens keep being prefilled: busy, not hung.
    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        r = replica("r0", t, generation_tokens=500.0, prompt_tokens=8192.0 * i, requests_running=4)
        return [r], [gpu("node-r0", t, utilisation=1.0)]

    det = Detection(DEFAULT, only=["stuck_gpu"])
    opened: list[Any] = []
    drive(tick, 8, each=lambda s, t: opened.extend(det.tick(s, now=t).opened))
    assert opened == []


def test_gpu_that_fell_off_the_bus_stays_flagged_with_its_stranded_requests_while_the_replica_is_stuck():
    # XID 79 at tick 6: the GPU leaves its (still answering) exporter, the replica's counters freeze with 4 running
    # and a queue that keeps growing. The FleetState default forgets unseen things after 300 s; a GPU missing from a
    # live exporter is not "unseen", so the finding must stay open for the whole stuck period (10 minutes here).
    fault_from, ticks = 6, 6 + 120

    def tick(i: int, t: float) -> tuple[list[Any], list[Any]]:
        stuck = i >= fault_from
        tokens = 100.0 * (fault_from - 1 if stuck else i)
        waiting = 3.0 * (i - fault_from) if stuck else 0.0
        r = replica("r0", t, generation_tokens=tokens, requests_running=4, requests_waiting=waiting)
        gpus = [gpu("node-r0", t, index="1", pod="r0")]
        if not stuck:
            gpus.append(gpu("node-r0", t, index="0", pod="r0"))
        return [r], gpus

    det = Detection(DEFAULT, only=["stuck_gpu"])
    open_ticks: list[int] = []
    last: list[Any] = []

    def each(state: Any, t: float) -> None:
        active = det.tick(state, now=t).active
        if active:
            open_ticks.append(int(t // 5))
            last[:] = active

    drive(tick, ticks, each=each)
    assert open_ticks[0] - fault_from <= 1
    assert open_ticks[-1] == ticks - 1
    assert len(open_ticks) >= ticks - fault_from - 1
    (f,) = last
    assert f.evidence["condition"] == "vanished"
    assert f.evidence["replica"] == "r0"
    assert f.evidence["stranded_requests"] == 4 + 3.0 * (ticks - 1 - fault_from)
    assert "requests stranded on r0" in f.summary


def test_a_replica_making_progress_strands_nothing():
    # An application XID on a replica that keeps producing tokens: flagged, but no request is stranded.
    opened, active = _opened_at(_scenario(HEALTHY_TICKS, gpu_kw={"last_xid": 13}))
    assert opened is not None
    (f,) = active
    assert f.evidence["stranded_requests"] == 0.0
    assert "stranded" not in f.summary
