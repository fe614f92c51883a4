import pytest

from collector.state import FleetState
from detectors.registry import DETECTORS, Detection, run_all
from tests.unit.detectors.detector_fleet import drive, gpu, replica


def test_every_detector_module_is_registered_under_its_kind():
    # The registry is the one list the control loop, the CLI and the alert generator iterate.
    assert set(DETECTORS) == {
        "kv_exhaustion",
        "kv_transfer_stall",
        "prefix_cache_miss",
        "rollout",
        "stuck_gpu",
        "target_down",
        "ttft_slo_burn",
    }


def test_unknown_kind_is_refused_by_name():
    # A typo in --only names the offending kind.
    with pytest.raises(ValueError, match="kv_exhuastion"):
        run_all(FleetState(), now=0, only=["kv_exhuastion"])


def test_detection_opens_through_hysteresis_and_restores():
    # End to end over the pure core: an XID 79 opens after two ticks; a new Detection restored from it keeps it open.
    det = Detection()
    state = drive(lambda i, t: ([replica("r0", t, generation_tokens=10.0 * i)], [gpu("node-r0", t, last_xid=79)]), 1)
    assert det.tick(state, now=0).active == []
    state.observe([replica("r0", 5, generation_tokens=10.0)], [gpu("node-r0", 5, last_xid=79)], now=5)
    (opened,) = det.tick(state, now=5).opened
    again = Detection(restore=det.active())
    assert [f.id for f in again.active()] == [opened.id]
