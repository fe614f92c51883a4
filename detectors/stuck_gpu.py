"""Stuck or sick GPUs: triaged XIDs, a GPU pinned busy while its replica makes no token progress, a GPU idle
while requests run, a GPU that vanished from its exporter, NVML's recovery action (XID 154).

One finding per GPU, identified by node and GPU only (not by the replica it serves, which changes when the
pod is rescheduled), carrying the most severe condition; the others go into the evidence.

NVIDIA MIG instances of one GPU share its UUID, and dcgm-exporter lists each instance with its own graphics-engine
activity and pod but with the GPU's device fields (the XID among them) repeated under every instance. So a finding
is about what its condition is about: an XID, NVML's recovery action and a GPU gone from its exporter are the
physical GPU's (one finding on its UUID, whichever instances repeat it); a hang or an idle GPU while requests run
are an instance's (its utilisation, its replica: one finding each, on ``<UUID>/mig<instance>``, the name kvpilot's
own GPU series give it). Two instances' conditions never share an identity, so neither overwrites the other's
finding nor turns its labels over tick by tick; a drain is the node's either way.
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


def gpu_subject(s: GpuSample) -> str:
    """The ``gpu`` a finding about this GPU or MIG instance names: its UUID, ``<UUID>/mig<instance>`` for a MIG
    instance (as kvpilot's own GPU series, ``api.exposition``), the index (``gpu/instance``) without a UUID."""
    base = s.uuid or s.index
    return f"{base}/mig{s.mig_instance}" if s.uuid and s.mig_instance is not None else base


def physical_subject(s: GpuSample) -> str:
    """The ``gpu`` a finding about the physical GPU under this sample names: its UUID, else its index (the GPU's
    part of a MIG instance's ``gpu/instance``)."""
    return s.uuid or s.index.split("/", 1)[0]


def _activity(s: GpuSample) -> float | None:
    """How busy the GPU or instance is, 0..1: its utilisation; for a MIG instance without one, its graphics-engine
    activity (dcgm-exporter lists no ``DCGM_FI_DEV_GPU_UTIL`` for MIG instances, only the GPU's ``GR_ENGINE_ACTIVE``
    per instance: the share of time the instance's engines are busy, as utilisation is the GPU's)."""
    util = fraction(s.utilisation)
    if util is None and s.mig_instance is not None:
        return fraction(s.extra.get("gr_engine_active"))
    return util


def _vanished(name: str) -> _Condition:
    return _Condition(
        "vanished", Severity.CRITICAL, "drain_node", f"{name} vanished from its exporter (fell off the bus?)"
    )


def _instance_conditions(
    gpu: GpuView, replica: ReplicaView | None, progress: bool | None, th: GpuThresholds, *, vanished: bool
) -> list[_Condition]:
    """What one GPU or MIG instance's own utilisation and replica say: a hang, or idle while requests run; and it
    vanished (``vanished``: the caller's call, since a whole GPU gone is the physical GPU's)."""
    s = gpu.sample
    name = f"GPU {s.index} on {s.node}"
    found: list[_Condition] = []
    if vanished:
        found.append(_vanished(name))
    live = replica is not None and replica.ready and replica.target_up
    running = finite(replica.sample.requests_running) if replica is not None and live else None
    util = fraction(s.utilisation)
    if util is None and s.mig_instance is not None:
        util = _activity(s)
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
    return found


def _xid_condition(samples: Sequence[GpuSample], name: str, *, wedged: bool, th: GpuThresholds) -> _Condition | None:
    """The physical GPU's XID (or NVML recovery action), triaged: the most severe its samples carry (a MIG GPU's
    instances repeat the one the GPU reports). ``wedged``: the GPU, or one of its instances, is hung."""
    worst: _Condition | None = None
    for s in samples:
        t = triage(s, wedged=wedged, gsp_recurring_count=th.gsp_recurring_count)
        if t.xid_class is XidClass.NONE or t.action == "none":
            continue
        severity = _CLASS_SEVERITY[t.xid_class]
        if worst is None or _RANK[severity] > _RANK[worst.severity]:
            worst = _Condition("xid", severity, t.action, f"{name}: {t.reason}")
    return worst


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


@dataclass(frozen=True, slots=True)
class _Seen:
    gpu: GpuView
    replica: ReplicaView | None
    progress: bool | None


def _built(
    node: str,
    subject_gpu: str,
    found: list[_Condition],
    now: float,
    stranded: tuple[float | None, str],
    evidence: dict[str, float | str | None],
) -> Finding:
    """The finding of ``found`` (its most severe condition first), ``stranded``: the requests stranded and on
    which replica(s)."""
    worst = max(found, key=lambda c: _RANK[c.severity])
    held, on = stranded
    summary = f"{worst.summary}; {held:.0f} requests stranded on {on}" if held and on else worst.summary
    return Finding(
        kind=KIND,
        severity=worst.severity,
        subject=Subject(node=node, gpu=subject_gpu),
        since=now,
        summary=summary,
        evidence={
            "conditions": ",".join(c.name for c in found),
            "condition": worst.name,
            **evidence,
            "stranded_requests": held,
        },
        action=worst.action,
    )


def _finding(
    seen: _Seen, subject_gpu: str, found: list[_Condition], now: float, extra: dict[str, float | str | None]
) -> Finding:
    gpu, replica = seen.gpu, seen.replica
    s: GpuSample = gpu.sample
    stranded = (_stranded(replica, seen.progress), replica.sample.replica if replica is not None else "")
    return _built(
        s.node,
        subject_gpu,
        found,
        now,
        stranded,
        {
            "xid": s.last_xid,
            "recovery_action": s.recovery_action,
            "utilisation": _activity(s),
            "present": "true" if gpu.present else "false",
            "deployment": replica.deployment_key if replica is not None else None,
            "replica": replica.sample.replica if replica is not None else None,
            "requests_running": finite(replica.sample.requests_running) if replica is not None else None,
            "requests_waiting": finite(replica.sample.requests_waiting) if replica is not None else None,
            **extra,
        },
    )


def _physical_finding(members: Sequence[_Seen], subject_gpu: str, found: list[_Condition], now: float) -> Finding:
    """A MIG GPU's own finding (an XID, the GPU gone): its instances' replicas named where they are one, all of
    them listed; no one instance's utilisation or requests."""
    samples = [m.gpu.sample for m in members]
    serving = sorted({(m.replica.deployment_key, m.replica.sample.replica) for m in members if m.replica is not None})
    known = [v for v in (_stranded(m.replica, m.progress) for m in members) if v is not None]
    one = serving[0] if len(serving) == 1 else None
    return _built(
        samples[0].node,
        subject_gpu,
        found,
        now,
        (sum(known) if known else None, ", ".join(r for _, r in serving)),
        {
            "xid": next((s.last_xid for s in samples if s.last_xid), samples[0].last_xid),
            "recovery_action": next((s.recovery_action for s in samples if s.recovery_action is not None), None),
            "present": "true" if any(m.gpu.present for m in members) else "false",
            "mig_instances": ",".join(sorted((str(s.mig_instance) for s in samples), key=lambda v: (len(v), v))),
            "deployment": one[0] if one else None,
            "replica": one[1] if one else None,
            "replicas": ",".join(r for _, r in serving) or None,
        },
    )


def detect(state: FleetState, *, thresholds: Thresholds, now: float) -> list[Finding]:
    th = thresholds.gpu
    replicas = {r.key: r for r in state.replicas()}
    out: list[Finding] = []
    mig: dict[tuple[str, str], list[_Seen]] = {}
    gpus = state.gpus()
    for gpu in gpus:
        s = gpu.sample
        replica = replicas.get(gpu.replica) if gpu.replica is not None else None
        progress = _made_progress(state.replica_history_newest(replica.key, 2)) if replica is not None else None
        if s.mig_instance is not None:
            mig.setdefault((s.node, physical_subject(s)), []).append(_Seen(gpu, replica, progress))
            continue
        # a GPU not partitioned: one finding, every condition, as always
        found = _instance_conditions(gpu, replica, progress, th, vanished=not gpu.present)
        hung = bool(found) and found[-1].name == "hang"
        t = triage(s, wedged=hung, gsp_recurring_count=th.gsp_recurring_count)
        if t.xid_class is not XidClass.NONE and t.action != "none":
            found.append(
                _Condition("xid", _CLASS_SEVERITY[t.xid_class], t.action, f"GPU {s.index} on {s.node}: {t.reason}")
            )
        if found:
            out.append(_finding(_Seen(gpu, replica, progress), s.uuid or s.index, found, now, {}))
    whole = (
        {(g.sample.node, g.sample.uuid or g.sample.index) for g in gpus if g.sample.mig_instance is None}
        if mig
        else set()
    )
    for key, members in mig.items():
        # a MIG GPU (its whole GPU listed beside its instances, while it is re-cut, keeps the GPU's finding)
        out.extend(_mig_findings(members, key[1], now, th, physical=key not in whole))
    return out


def _mig_findings(
    members: Sequence[_Seen], subject_gpu: str, now: float, th: GpuThresholds, *, physical: bool
) -> list[Finding]:
    """A MIG GPU's findings: each instance's own (hang, idle while running, one instance gone while the others
    stay), and the physical GPU's (its XID, the whole GPU gone) once, on its UUID."""
    out: list[Finding] = []
    gone = not any(m.gpu.present for m in members)
    hung = False
    for m in members:
        found = _instance_conditions(m.gpu, m.replica, m.progress, th, vanished=not gone and not m.gpu.present)
        hung = hung or any(c.name == "hang" for c in found)
        if found:
            out.append(_finding(m, gpu_subject(m.gpu.sample), found, now, {"physical_gpu": subject_gpu}))
    if not physical:
        return out
    first = members[0].gpu.sample
    name = f"GPU {first.index.split('/', 1)[0]} on {first.node} (MIG, {len(members)} instance(s))"
    own: list[_Condition] = []
    if gone:
        own.append(_vanished(name))
    xid = _xid_condition([m.gpu.sample for m in members], name, wedged=hung, th=th)
    own += [xid] if xid is not None else []
    if own:
        out.append(_physical_finding(members, subject_gpu, own, now))
    return out
