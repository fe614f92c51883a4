"""Stuck or sick GPUs: triaged XIDs, a GPU pinned busy while its replica makes no token progress, a GPU idle
while requests run, a GPU that vanished from its exporter, NVML's recovery action (XID 154).

One finding per GPU, identified by node and GPU only (not by the replica it serves, which changes when the
pod is rescheduled), carrying the most severe condition; the others go into the evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collector.samples import GpuSample, ReplicaSample
from collector.state import FleetState, GpuView, ReplicaView
from detectors._values import finite, fraction
from detectors.finding import Finding, Severity, Subject
from detectors.thresholds import GpuThresholds, Thresholds
from detectors.xid import XidClass, triage

KIND = "stuck_gpu"

_CLASS_SEVERITY = {
    XidClass.APPLICATION: Severity.INFO,
    XidClass.WATCH: Severity.WARNING,
    XidClass.DRIVER: Severity.WARNING,
    XidClass.UNKNOWN: Severity.WARNING,
    XidClass.DRAIN: Severity.CRITICAL,
}
_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


@dataclass(frozen=True, slots=True)
class _Condition:
    name: str  # xid | hang | idle_while_running | vanished
    severity: Severity
    action: str
    summary: str


_PROGRESS_COUNTERS = ("generation_tokens", "prompt_tokens", "requests_finished")


def _made_progress(history: Sequence[ReplicaSample]) -> bool | None:
    """Did the replica produce anything since its previous sample: a decoded token, a prefilled prompt, a
    finished request? (A batch of long prompts in chunked prefill decodes nothing for seconds; it is busy, not
    hung.) None when no progress counter is known on both samples."""
    if len(history) < 2:
        return None
    known = False
    for name in _PROGRESS_COUNTERS:
        before, after = finite(getattr(history[-2], name)), finite(getattr(history[-1], name))
        if before is None or after is None:
            continue
        known = True
        if after != before:  # a restart (counter down) is also progress of a sort: not hung
            return True
    return False if known else None


def _conditions(
    gpu: GpuView, replica: ReplicaView | None, progress: bool | None, th: GpuThresholds
) -> list[_Condition]:
    s = gpu.sample
    name = f"GPU {s.index} on {s.node}"
    found: list[_Condition] = []
    if not gpu.present:
        found.append(
            _Condition(
                "vanished", Severity.CRITICAL, "drain_node", f"{name} vanished from its exporter (fell off the bus?)"
            )
        )
    live = replica is not None and replica.ready and replica.target_up
    running = finite(replica.sample.requests_running) if replica is not None and live else None
    util = fraction(s.utilisation)
    hung = bool(gpu.present and running and progress is False and util is not None and util >= th.busy_utilisation)
    if hung:
        found.append(
            _Condition("hang", Severity.CRITICAL, "drain_node", f"{name} pinned at {util:.0%} with no token progress")
        )
    elif gpu.present and running and progress is False and util is not None and util <= th.idle_utilisation:
        found.append(
            _Condition(
                "idle_while_running",
                Severity.WARNING,
                "restart_workload",
                f"{name} idle ({util:.0%}) while {running:g} requests run without progress",
            )
        )
    t = triage(s, wedged=hung, gsp_recurring_count=th.gsp_recurring_count)
    if t.xid_class is not XidClass.NONE and t.action != "none":
        found.append(_Condition("xid", _CLASS_SEVERITY[t.xid_class], t.action, f"{name}: {t.reason}"))
    return found


def _stranded(replica: ReplicaView | None, progress: bool | None) -> float | None:
    """Requests held by a replica that makes no progress (queued and running): they are served only once the
    replica is restarted or its pod evicted and they are retried elsewhere. 0 for a replica still making
    progress, None without one."""
    if replica is None:
        return None
    if progress is not False:
        return 0.0
    held = [finite(replica.sample.requests_waiting), finite(replica.sample.requests_running)]
    known = [v for v in held if v is not None]
    return sum(known) if known else None


def _finding(
    gpu: GpuView, replica: ReplicaView | None, found: list[_Condition], now: float, stranded: float | None
) -> Finding:
    worst = max(found, key=lambda c: _RANK[c.severity])
    s: GpuSample = gpu.sample
    summary = worst.summary
    if stranded and replica is not None:
        summary = f"{summary}; {stranded:.0f} requests stranded on {replica.sample.replica}"
    return Finding(
        kind=KIND,
        severity=worst.severity,
        subject=Subject(node=s.node, gpu=s.uuid or s.index),
        since=now,
        summary=summary,
        evidence={
            "conditions": ",".join(c.name for c in found),
            "condition": worst.name,
            "xid": s.last_xid,
            "recovery_action": s.recovery_action,
            "utilisation": fraction(s.utilisation),
            "present": "true" if gpu.present else "false",
            "deployment": replica.deployment_key if replica is not None else None,
            "replica": replica.sample.replica if replica is not None else None,
            "requests_running": finite(replica.sample.requests_running) if replica is not None else None,
            "requests_waiting": finite(replica.sample.requests_waiting) if replica is not None else None,
            "stranded_requests": stranded,
        },
        action=worst.action,
    )


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    replicas = {r.key: r for r in state.replicas()}
    out: list[Finding] = []
    for gpu in state.gpus():
        replica = replicas.get(gpu.replica) if gpu.replica is not None else None
        progress = _made_progress(state.replica_history_newest(replica.key, 2)) if replica is not None else None
        found = _conditions(gpu, replica, progress, thresholds.gpu)
        if found:
            out.append(_finding(gpu, replica, found, now, _stranded(replica, progress)))
    return out
