"""`kvpilot demo --rollout-at`: a rolling update through the simulator's control API, kvpilot's surge for it (or
none, `--no-surge`), and the summary's rollout section, on a short replay."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvpilot.demo.replay import DemoConfig, run_demo

pytestmark = pytest.mark.e2e

# Five replicas replaced two at a time at the trace's opening: without a surge 40 % of them are out at once, above
# the rollout detector's 25 %; a few simulated minutes, so that the test runs in seconds.
ROLLING = DemoConfig(speed=0, duration_s=420, faults=(), replicas=5, rollout_at_s=60, rollout_wave=2)


def _summary(cfg: DemoConfig) -> dict[str, Any]:
    return asyncio.run(run_demo(cfg, on_update=lambda *_: None)).to_json()


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return {"surge": _summary(ROLLING), "no_surge": _summary(DemoConfig(**{**ROLLING.__dict__, "surge": False}))}


def test_the_rollout_section_says_when_it_ran_and_how_requests_fared(runs: dict[str, dict[str, Any]]) -> None:
    ro = runs["surge"]["rollout"]
    assert (ro["at_s"], ro["wave"], ro["surge"]) == (60.0, 2, True)
    w, before = ro["window"], ro["before"]
    assert w["start_s"] == 60.0
    assert ro["ended"]
    assert 60.0 < w["end_s"] < 420.0
    # the window before is as long (cut at the replay's start)
    assert before["end_s"] == w["start_s"]
    assert before["start_s"] == max(0.0, 2 * w["start_s"] - w["end_s"])
    assert w["requests"] > 0
    assert before["requests"] > 0
    assert 0.0 <= w["slo_attainment"] <= 1.0
    assert w["p99_ttft_s"] > 0
    assert runs["surge"]["fault_findings"][0]["fault"] == "rollout"


def test_kvpilot_surges_for_the_rollout_and_not_with_no_surge(runs: dict[str, dict[str, Any]]) -> None:
    surge, none = runs["surge"]["rollout"], runs["no_surge"]["rollout"]
    assert surge["peak_surge_replicas"] > 0
    assert surge["surge_replica_hours"] > 0
    assert none["peak_surge_replicas"] == 0
    assert none["surge_replica_hours"] == 0
    # the surge is paid for in replica-hours and keeps the window's requests at least as well served
    assert runs["surge"]["replica_hours"] > runs["no_surge"]["replica_hours"]
    assert surge["window"]["slo_attainment"] >= none["window"]["slo_attainment"]


def test_the_rollout_finding_opens_when_the_rollout_takes_out_too_many(runs: dict[str, dict[str, Any]]) -> None:
    ro = runs["no_surge"]["rollout"]
    assert runs["no_surge"]["findings"].get("rollout") == 1
    assert ro["finding_after_s"] is not None
    assert ro["finding_after_s"] > 0
    assert runs["no_surge"]["fault_findings"][0]["finding"] == "rollout"


def test_a_rollout_past_the_trace_is_refused() -> None:
    from kvpilot.demo.replay import DemoError

    cfg = DemoConfig(speed=0, duration_s=10_000_000, faults=(), rollout_at_s=9_000_000)
    with pytest.raises(DemoError, match="not within the trace"):
        asyncio.run(run_demo(cfg, on_update=lambda *_: None))
