"""A busy machine must not change what `kvpilot demo` decides. Its control loop scrapes its own simulator, paused in
lockstep while it does, so no answer is late in simulated time; the scrapes timed out at the collector's 4.5 s of wall
time all the same (two cores at load 17–25, session 31), and the replica left out of that tick's readings changed the
decisions after it and the first scale-up: seed 233's came at 205 s with 1 waiting instead of 535 s with 26."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from kvpilot.demo.replay import DemoConfig, run_demo
from kvpilot.runtime.snapshot import Snapshot
from simulator import server as sim_server

pytestmark = pytest.mark.e2e

SHORT = DemoConfig(speed=0, duration_s=90, drain_s=30, faults=(), rate_scale=4.0)  # no faults: seconds
# One scrape answered this much later in wall time: past the 4.5 s (0.9 × the 5 s tick) the demo's scrapes allowed.
STALL_S = 5.0
STALL_FROM_S = 40.0  # simulated seconds into the replay: the first replica page asked for after it is the slow one


def _decisions(on_update_rows: list[tuple[Any, ...]]) -> Any:
    def tick(snap: Snapshot | None, *_: object) -> None:
        if snap is None:
            return
        for key, d in sorted(snap.decisions.items()):
            if d.timestamp != snap.t:
                continue  # a stored decision shown until re-decided
            numbers = {k: "nan" if math.isnan(v) else round(v, 9) for k, v in sorted(d.forecast.items())}
            on_update_rows.append((snap.t, key, d.current_replicas, d.desired_replicas, d.reason, numbers))

    return tick


def _replay(monkeypatch: pytest.MonkeyPatch, stall: bool) -> tuple[list[tuple[Any, ...]], dict[str, Any], int]:
    """Every decision of the short replay (tick, deployment, counts, reason, numbers), its summary, and how many
    replica pages were answered late."""
    stalled: list[str] = []
    if stall:
        get = sim_server._Handler._get
        epoch = None

        def slow(self: Any) -> None:
            nonlocal epoch
            epoch = self.live.fleet.time if epoch is None else epoch
            parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
            late = self.live.fleet.time - epoch >= STALL_FROM_S
            if not stalled and late and len(parts) == 3 and parts[0] == "replicas" and parts[2] == "metrics":
                stalled.append(parts[1])
                threading.Event().wait(STALL_S)  # the busy machine: this answer comes late
            get(self)

        monkeypatch.setattr(sim_server._Handler, "_get", slow)
    rows: list[tuple[Any, ...]] = []
    summary = asyncio.run(run_demo(SHORT, on_update=_decisions(rows)))
    return rows, summary.to_json(), len(stalled)


def test_a_scrape_answered_late_in_wall_time_changes_no_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the scrape gave up after 4.5 s ("target ... is down: timed out after 4.5 s"), the replica's sample was
    # missing from that tick's FleetState, and the decisions from there on read other numbers
    plain, plain_summary, _ = _replay(monkeypatch, stall=False)
    late, late_summary, stalls = _replay(monkeypatch, stall=True)
    assert stalls == 1
    assert len(plain) >= 15  # every tick of the 90 s replay decided
    assert late == plain
    assert late_summary == plain_summary
