"""kv_transfer_stall: prefill finishes prompts whose KV decode never receives; silent when decode keeps up, when
the pools are quiet, and on a co-located deployment."""

from __future__ import annotations

import pytest

from detectors.kv_transfer_stall import detect
from detectors.thresholds import DEFAULT
from tests.unit.detectors.detector_fleet import TICK_S, drive, replica

CASES = [
    # decode takes in nothing while prefill hands over 4 req/s: KV is stuck between the pools
    (4.0, 0.0, None, ["ml/chat@decode"]),
    # decode takes in what prefill hands over: a healthy hand-over
    (4.0, 4.0, None, []),
    # decode lagging by a quarter is a lag, not a stall
    (4.0, 3.0, None, []),
    # quiet pools: 0.2 req/s proves nothing
    (0.2, 0.0, None, []),
    # a co-located deployment has no hand-over to stall
    (4.0, 0.0, "both", []),
]


@pytest.mark.parametrize(("prefilled_rps", "decoded_rps", "roles", "expected"), CASES)
def test_kv_transfer_stall(prefilled_rps: float, decoded_rps: float, roles: str | None, expected: list[str]) -> None:
    prefill_role, decode_role = ("prefill", "decode") if roles is None else (None, None)

    def tick(i: int, t: float):  # type: ignore[no-untyped-def]
        return (
            [
                replica("p0", t, role=prefill_role, requests_running=1.0, requests_finished=prefilled_rps * t),
                replica("d0", t, role=decode_role, requests_running=8.0, requests_finished=decoded_rps * t),
            ],
            [],
        )

    state = drive(tick, 20)
    findings = detect(state, thresholds=DEFAULT, now=20 * TICK_S)
    assert [f.subject.deployment for f in findings] == expected
    for f in findings:
        assert "KV is not arriving" in f.summary
        assert f.evidence["prefilled_rps"] == pytest.approx(prefilled_rps)
