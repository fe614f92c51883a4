"""The exported KV projection reuses the trend the detector fitted in the same tick (``Detection.kv_trends``): one
short-window fit per ready replica and tick, not one for the detector and another for /metrics."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from collector.clock import VirtualClock
from detectors import kv_trend
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks


async def test_a_tick_fits_each_replicas_trend_once(tmp_path: Path) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, replicas=(("chat-0", "n0"), ("chat-1", "n0"), ("chat-2", "n0")))
    service, restored, timer = make_service(f"sqlite:///{tmp_path / 'k.db'}", clock, fleet)
    await service.start(restored)
    try:
        await run_ticks(service, timer, 3)  # a history to fit
        with mock.patch.object(kv_trend, "fit_trend", wraps=kv_trend.fit_trend) as fits:
            await run_ticks(service, timer, 2)
        snap = service.snapshot()
    finally:
        service.stop.set()
        await service.wait()
    assert snap is not None
    assert len(snap.kv_time_to_exhaustion) == 3  # every replica projected (KV 40 % and flat: never full)
    # KV flat at 40 %: no finding awaits the longer trend's confirmation, so only the short trend is fitted.
    assert fits.call_count == 3 * 2
