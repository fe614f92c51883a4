"""The demo's summary: never-served requests count as SLO misses everywhere, decision reasons map to three groups,
and the first scale-up is the first decision asking for more replicas than there are."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.samples import ReplicaSample
from collector.state import FleetState
from kvpilot.demo.replay import DemoSummary, _count_requests, _evict_stuck, _Tracker, decision_group
from kvpilot.demo.view import Event
from kvpilot.runtime.snapshot import Snapshot
from scaler.decision import Decision
from simulator import Fleet, FleetConfig, load_trace, parse_fault


def _stuck_fleet() -> Fleet:
    # One replica that hangs at t=30 and is never evicted: everything routed to it from then on waits forever.
    fleet = Fleet(FleetConfig(replicas=1), load_trace("synthetic:duration_s=120,rate=4", seed=3))
    fleet.advance_to(30)
    fleet.inject(parse_fault({"type": "hung_gpu", "node": "node-0", "gpu": 0}))
    fleet.advance_to(120)
    return fleet


def test_never_served_requests_are_counted_as_misses_with_their_wait() -> None:
    fleet = _stuck_fleet()
    s = DemoSummary()
    _count_requests(s, fleet, now=120.0, slo_s=2.0)
    unserved = [a for a, first in fleet.in_flight() if first is None]
    finished = fleet.finished()
    assert s.requests == fleet.snapshot().arrivals_total
    assert s.never_served == len(unserved) > 100
    assert s.served + s.never_served == s.requests
    # Attainment over all requests: the stuck ones are misses, not left out.
    first_tokens = [f.ttft_s for f in finished] + [first for _, first in fleet.in_flight() if first is not None]
    within = sum(1 for v in first_tokens if v <= 2.0)
    assert s.served == len(first_tokens)
    assert s.slo_attainment == pytest.approx(within / s.requests)
    assert s.slo_attainment < within / len(first_tokens)
    # p99 covers the never-served at their wait so far: here well above any served request's TTFT.
    assert s.ttft_s["p99"] is not None
    assert s.ttft_s["p99"] > max(f.ttft_s for f in finished)
    assert s.ttft_s["p99"] <= 120.0 - 30.0


def test_nothing_arrived_is_full_attainment() -> None:
    fleet = Fleet(FleetConfig(replicas=1), load_trace("synthetic:duration_s=120,rate=4", seed=3))
    s = DemoSummary()
    _count_requests(s, fleet, now=0.0, slo_s=2.0)
    assert (s.requests, s.served, s.never_served, s.slo_attainment) == (0, 0, 0, 1.0)
    assert s.ttft_s["p99"] is None


@pytest.mark.parametrize(
    ("reason", "group"),
    [
        ("predictive", "predictive"),  # the forecast set the count
        ("reactive", "reactive"),  # queue and arrivals set it
        ("within_tolerance", "hold"),  # kept within tolerance
        ("stabilised", "hold"),  # scale-down held by the window
        ("step_limited", "hold"),  # capped by the step limit
        ("clamped_max", "hold"),  # capped at max_replicas
        ("no_metrics", "hold"),  # nothing known: held
        ("capacity_unknown", "hold"),  # any reason the planner adds later is a hold until mapped
    ],
)
def test_decision_groups(reason: str, group: str) -> None:
    assert decision_group(reason) == group


def _snapshot(t: float, *, current: int, desired: int, reason: str, waiting: float) -> Snapshot:
    state = FleetState()
    sample = ReplicaSample(
        namespace="inference",
        deployment="llama",
        replica="llama-0000",
        node="node-0",
        engine="vllm",
        model="m",
        timestamp=t,
        requests_waiting=waiting,
        requests_running=1.0,
    )
    state.observe([sample], [], now=t)
    d = Decision(
        deployment="inference/llama",
        timestamp=t,
        current_replicas=current,
        ready_replicas=current,
        desired_replicas=desired,
        warm_pool=0,
        reason=reason,
        message="",
    )
    return Snapshot(
        tick=1, t=t, deployments=state.deployments(), replicas=state.replicas(), decisions={d.deployment: d}
    )


def test_first_scale_up_is_the_first_decision_above_the_current_count() -> None:
    events: list[Event] = []
    tracker = _Tracker(events)
    ticks = [
        (0, 2, 2, "within_tolerance", 0.0),
        (5, 2, 2, "stabilised", 1.0),
        (10, 2, 4, "predictive", 3.0),  # the first scale-up
        (15, 4, 6, "reactive", 9.0),
    ]
    for t, current, desired, reason, waiting in ticks:
        tracker.observe(_snapshot(t, current=current, desired=desired, reason=reason, waiting=waiting), t)
    s = tracker.summary
    assert s.first_scale_up == {"t": 10, "reason": "predictive", "waiting": 3.0}
    assert s.decisions == {"predictive": 1, "reactive": 1, "hold": 2}
    assert [e.text.split(":")[1].strip() for e in events] == ["desired 2 → 4 (predictive)", "desired 4 → 6 (reactive)"]


def test_a_stored_decision_shown_again_is_not_counted_twice() -> None:
    tracker = _Tracker([])
    snap = _snapshot(0, current=2, desired=2, reason="within_tolerance", waiting=0.0)
    tracker.observe(snap, 0)
    tracker.observe(replace(snap, tick=2, t=5.0), 5)  # the same decision, still listed at the next tick
    assert tracker.summary.decisions == {"predictive": 0, "reactive": 0, "hold": 1}


def test_the_series_for_the_plot_follow_the_decisions() -> None:
    tracker = _Tracker([])
    for t, current, desired in [(0, 2, 2), (5, 2, 4), (10, 4, 4)]:
        tracker.observe(_snapshot(t, current=current, desired=desired, reason="predictive", waiting=float(t)), t)
    series = tracker.summary.series
    assert series.t == [0, 5, 10]
    assert series.desired == [2, 4, 4]
    assert series.waiting == [0.0, 5.0, 10.0]


def test_piped_output_tells_the_story_url_first_then_events_with_simulated_time() -> None:
    import io

    from rich.console import Console

    from kvpilot.commands.demo import _PlainText

    out = io.StringIO()
    plain = _PlainText(Console(file=out, width=300, force_terminal=False))
    header = "kvpilot demo — conv ×4, seed 0 · API http://127.0.0.1:8080/docs · simulator http://127.0.0.1:9"
    events: list[Event] = []
    plain.update(None, events, header)
    events += [
        Event(900.0, "fault xid: XID 79 on node-0/1"),
        Event(905.0, "finding opened: critical stuck_gpu: GPU 1 on node-0 vanished → drain_node"),
        Event(1605.0, "inference/llama: desired 2 → 3 (predictive): forecast needs 3"),
    ]
    snap = _snapshot(1605.0, current=2, desired=3, reason="predictive", waiting=0.0)
    plain.update(snap, events, f"{header} · t=1,605s simulated")
    lines = out.getvalue().splitlines()
    assert lines[0] == header  # the URL before anything else
    assert lines[1:4] == [
        "t=    900s  fault xid: XID 79 on node-0/1",
        "t=    905s  finding opened: critical stuck_gpu: GPU 1 on node-0 vanished → drain_node",
        "t=  1,605s  inference/llama: desired 2 → 3 (predictive): forecast needs 3",
    ]
    assert lines[4].startswith("t=1,605s simulated | ")
    plain.update(snap, events, f"{header} · t=1,610s simulated")
    assert out.getvalue().splitlines()[5:] == []  # no event printed twice, no status line within the minute


def test_each_fault_is_credited_only_with_its_own_kind_before_the_next_fault() -> None:
    from kvpilot.demo.replay import attribute_findings

    faults = [(900.0, "xid"), (1500.0, "routing"), (2100.0, "kv_pressure"), (2700.0, "hung_gpu")]
    findings = [
        (200.0, "kv_exhaustion"),  # before any fault: credited to none
        (905.0, "stuck_gpu"),
        (1700.0, "prefix_cache_miss"),
        (2720.0, "kv_exhaustion"),  # after the hang: not the burst's, which raised nothing before it
        (2715.0, "stuck_gpu"),
    ]
    got = attribute_findings(faults, findings)
    assert [(f["fault"], f["finding"], f["after_s"]) for f in got] == [
        ("xid", "stuck_gpu", 5.0),
        ("routing", "prefix_cache_miss", 200.0),
        ("kv_pressure", None, None),
        ("hung_gpu", "stuck_gpu", 15.0),
    ]


async def test_the_demo_tells_the_rollout_stage_of_its_eviction_before_it_posts_it() -> None:
    # The demo's eviction stands in for the drain actuator's: the same notification, first, with the pod's key.
    import httpx

    from detectors.finding import Finding, Severity, Subject

    order: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        order.append(f"POST {request.url.path} {request.content.decode()}")
        return httpx.Response(200, json={"requests_retried": 3})

    snap = _snapshot(30.0, current=2, desired=2, reason="predictive", waiting=0.0)
    stuck = Finding(
        "stuck_gpu",
        Severity.CRITICAL,
        Subject(node="node-0", gpu="0"),
        10.0,
        "XID 79",
        evidence={"replica": "llama-0000", "deployment": "inference/llama"},
        action="drain_node",
    )
    snap = replace(snap, findings=(stuck,))
    s, evicted = DemoSummary(), set[str]()
    async with httpx.AsyncClient(base_url="http://sim", transport=httpx.MockTransport(handle)) as client:
        for t in (30.0, 35.0):  # the finding stays open: evicted once, told once
            await _evict_stuck(client, snap, t, evicted, s, [], lambda pod, now: order.append(f"told {pod} {now}"))
    assert order == ["told inference/llama-0000 30.0", 'POST /control/evict {"replica":"llama-0000"}']
    assert s.evictions == [{"t": 30.0, "replica": "llama-0000", "requests_retried": 3}]
