"""bench/rollout.py's window follows the rollout: from its start to a cold start after every replica is new and
ready, whatever the fleet's size, and kvpilot-base is measured over each row's own window. Before 2026-12-06 the
window was sized for the bench's fleet of ``--replicas`` (T_ROLLOUT + (waves + 2) cold starts), so where the
planner sized a larger fleet (Azure code: 16-20 replicas for a bench of 4) it ended before the rollout did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.helpers.bench import load_bench

TRACE = "synthetic:duration_s=2000,rate=3,amplitude=0,bursts=0,prompt_mean=400,output_mean=150"


def _run(mode: str, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    # the planner never below 6 replicas on a bench fleet of 2: six waves of 1, where the fleet-sized window holds two
    monkeypatch.setenv("KVPILOT_SCALER__DEFAULT__MIN_REPLICAS", "6")
    return load_bench("rollout").run(TRACE, 1.0, 2, 1, mode, start_s=0.0, **kwargs)


def test_the_window_lasts_until_the_rollout_is_done_and_a_cold_start_after(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench("rollout")
    r = _run("kvpilot", monkeypatch)
    assert r.rollout_end_s is not None
    assert r.rollout_end_s > bench.window_end(2, 1)  # the fleet-sized window would have ended before the rollout
    assert r.window_end_s == r.rollout_end_s + bench.COLD_S
    assert not r.window_cut
    assert r.ran_to_s == r.window_end_s + 60.0


def test_a_rollout_not_done_by_the_segments_end_has_its_window_cut_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _run("kvpilot", monkeypatch, max_s=900.0)
    assert r.rollout_end_s is None
    assert r.window_cut
    assert r.window_end_s == 840.0


def test_kvpilot_base_is_measured_over_each_rows_own_window() -> None:
    """kvpilot-base ran to the longest window (1,100 s) and missed one request at 1,000 s; a kvpilot row whose
    window ends at 900 s is compared with kvpilot-base's requests before 900 s (all met), and its surge with
    kvpilot-base's replica-hours over the same span (0.53 to 960 s, not 0.64 to 1,160 s)."""
    bench = load_bench("rollout")
    arrivals = np.array([400.0, 1000.0])
    alone = bench.Run(0.5, 0.64, 1100.0, ran_to_s=1160.0, alive=[(480.0, 2), (960.0, 2), (1160.0, 2)])
    alone.ttfts, alone.arrivals = [(400.0, 0.5), (1000.0, 5.0)], arrivals
    rolled = bench.Run(1.0, 0.8, 900.0, rollout_end_s=780.0, ran_to_s=960.0, alive=[(480.0, 3), (960.0, 3)])
    rolled.ttfts, rolled.arrivals = [(400.0, 0.5)], arrivals
    (base_line, line) = bench.report_lines(["kvpilot-base", "kvpilot"], {"kvpilot-base": alone, "kvpilot": rolled})
    assert "300-1100 s" in base_line
    assert "300-900 s" in line
    assert "against kvpilot-base +0.00 points (met: within 1), surge +0.27 replica-hours" in line
