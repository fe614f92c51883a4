import pytest

from collector.samples import GpuSample
from detectors.xid import XidClass, triage


def _gpu(xid: int | None, *, count: float | None = None, ra: int | None = None) -> GpuSample:
    return GpuSample(
        node="n", index="0", uuid="u", model_name=None, timestamp=0, last_xid=xid, xid_count=count, recovery_action=ra
    )


CASES = [
    # every application / transient XID of ENGINES.md restarts the workload and never drains
    *[(_gpu(x), XidClass.APPLICATION, "restart_workload") for x in (8, 11, 13, 31, 43, 45, 68, 109)],
    # watch class: reset at the next idle window
    *[(_gpu(x), XidClass.WATCH, "reset_gpu") for x in (63, 92)],
    # drain class, including 79 (fallen off the bus)
    *[(_gpu(x), XidClass.DRAIN, "drain_node") for x in (48, 61, 62, 64, 74, 79, 94, 95, 140)],
    # GSP errors isolated: watch
    (_gpu(119, count=1), XidClass.WATCH, "reset_gpu"),
    (_gpu(120), XidClass.WATCH, "reset_gpu"),
    # GSP errors recurring: drain
    (_gpu(120, count=3), XidClass.DRAIN, "drain_node"),
    # 154 follows NVML's recovery action: 0 none, 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset
    (_gpu(154, ra=0), XidClass.WATCH, "none"),
    (_gpu(154, ra=1), XidClass.WATCH, "reset_gpu"),
    (_gpu(154, ra=2), XidClass.DRAIN, "drain_node"),
    (_gpu(154, ra=3), XidClass.DRAIN, "drain_node"),
    (_gpu(154, ra=4), XidClass.DRAIN, "drain_node"),
    # 154 without the field: tell a human, do not guess
    (_gpu(154), XidClass.DRIVER, "notify"),
    # a recovery action code NVML may add later: notify, never drain
    (_gpu(154, ra=9), XidClass.UNKNOWN, "notify"),
    # an XID outside the table: notify
    (_gpu(999), XidClass.UNKNOWN, "notify"),
    # no XID (dcgm reports 0) and unknown (None) are both "none"
    (_gpu(0), XidClass.NONE, "none"),
    (_gpu(None), XidClass.NONE, "none"),
]


@pytest.mark.parametrize(("gpu", "cls", "action"), CASES)
def test_triage_table(gpu, cls, action):
    t = triage(gpu)
    assert (t.xid_class, t.action) == (cls, action)


def test_gsp_xid_on_a_wedged_gpu_is_drain_class():
    # 119 on a GPU that is also hung is drained even when isolated.
    assert triage(_gpu(119), wedged=True).xid_class is XidClass.DRAIN
