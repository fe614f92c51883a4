"""XID triage by class, exactly as ENGINES.md tabulates it (NVIDIA k8s-device-plugin health.go plus runbooks).

Pure: a GPU sample in, a class and an action out. ``stuck_gpu`` turns the result into findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from collector.samples import GpuSample


class XidClass(StrEnum):
    NONE = "none"
    APPLICATION = "application"  # restart the workload; do not drain
    WATCH = "watch"  # reset at the next idle window
    DRAIN = "drain"  # cordon, drain, reset; RMA if it recurs
    DRIVER = "driver"  # 154: follow NVML's recovery action
    UNKNOWN = "unknown"  # not in the table: tell a human, touch nothing


APPLICATION_XIDS = frozenset({8, 11, 13, 31, 43, 45, 68, 109})
WATCH_XIDS = frozenset({63, 92})
DRAIN_XIDS = frozenset({48, 61, 62, 64, 74, 79, 94, 95, 140})
GSP_XIDS = frozenset({119, 120})  # watch when isolated and recovered; drain when recurring or wedged
RECOVERY_ACTION_XID = 154

# NVML field 230 (GPU recovery action) -> (class, action)
_RECOVERY: dict[int, tuple[XidClass, str]] = {
    0: (XidClass.WATCH, "none"),
    1: (XidClass.WATCH, "reset_gpu"),
    2: (XidClass.DRAIN, "drain_node"),  # a node reboot needs the node drained first
    3: (XidClass.DRAIN, "drain_node"),  # drain peer-to-peer traffic: take the node out of service
    4: (XidClass.DRAIN, "drain_node"),  # drain and reset
}

_ACTION: dict[XidClass, str] = {
    XidClass.NONE: "none",
    XidClass.APPLICATION: "restart_workload",
    XidClass.WATCH: "reset_gpu",
    XidClass.DRAIN: "drain_node",
    XidClass.UNKNOWN: "notify",
}


@dataclass(frozen=True, slots=True)
class Triage:
    xid: int | None
    xid_class: XidClass
    action: str
    reason: str


def triage(gpu: GpuSample, *, wedged: bool = False, gsp_recurring_count: float = 2.0) -> Triage:
    """Classify the GPU's last XID. ``wedged``: the GPU is also hung (no progress) — escalates 119/120."""
    xid = gpu.last_xid
    if xid is None or xid == 0:
        return Triage(None, XidClass.NONE, "none", "no XID")
    if xid == RECOVERY_ACTION_XID:
        ra = gpu.recovery_action
        if ra is None:
            return Triage(xid, XidClass.DRIVER, "notify", "XID 154 but the NVML recovery action (field 230) is unknown")
        cls, action = _RECOVERY.get(ra, (XidClass.UNKNOWN, "notify"))
        return Triage(xid, cls, action, f"XID 154 with NVML recovery action {ra}")
    if xid in DRAIN_XIDS:
        return Triage(xid, XidClass.DRAIN, _ACTION[XidClass.DRAIN], f"XID {xid} is drain class")
    if xid in GSP_XIDS:
        recurring = gpu.xid_count is not None and gpu.xid_count >= gsp_recurring_count
        if recurring or wedged:
            why = "recurring" if recurring else "with the GPU wedged"
            return Triage(xid, XidClass.DRAIN, _ACTION[XidClass.DRAIN], f"XID {xid} (GSP) {why}")
        return Triage(xid, XidClass.WATCH, _ACTION[XidClass.WATCH], f"XID {xid} (GSP), isolated")
    if xid in WATCH_XIDS:
        return Triage(xid, XidClass.WATCH, _ACTION[XidClass.WATCH], f"XID {xid} is watch class")
    if xid in APPLICATION_XIDS:
        return Triage(xid, XidClass.APPLICATION, _ACTION[XidClass.APPLICATION], f"XID {xid} is application class")
    return Triage(xid, XidClass.UNKNOWN, _ACTION[XidClass.UNKNOWN], f"XID {xid} is not in the triage table")
