"""The demo's terminal view renders what the service knows, and shows unknown as a dash, never as zero."""

from __future__ import annotations

from rich.console import Console

from collector.samples import GpuSample, ReplicaSample
from collector.state import FleetState
from detectors.finding import Finding, Severity, Subject
from kvpilot.demo.view import Event, fmt, layout, replicas_table
from kvpilot.runtime.snapshot import Snapshot
from scaler.decision import Decision


def _render(snap: Snapshot | None, events: list[Event]) -> str:
    console = Console(width=200, height=60, record=True, color_system=None)
    console.print(layout(snap, events, "kvpilot demo — test"))
    return console.export_text()


def _snapshot() -> Snapshot:
    state = FleetState()
    replica = ReplicaSample(
        namespace="llm",
        deployment="chat",
        replica="chat-0",
        node="node-0",
        engine="vllm",
        model="llama",
        timestamp=10.0,
        requests_waiting=7,
        requests_running=3,
        kv_usage=None,  # unknown: must not be shown as 0%
    )
    gpu = GpuSample(
        node="node-0", index="0", uuid="GPU-1", model_name="H100", timestamp=10.0, last_xid=79, pod="chat-0"
    )
    state.observe([replica], [gpu], now=10.0)
    decision = Decision(
        deployment="llm/chat",
        timestamp=10.0,
        current_replicas=1,
        ready_replicas=1,
        desired_replicas=3,
        warm_pool=2,
        reason="predictive",
        message="demand rising: 3 replicas needed at the horizon",
        forecast={"arrival_rate": 4.5, "arrival_rate_upper": 6.0},
    )
    finding = Finding(
        kind="stuck_gpu",
        severity=Severity.CRITICAL,
        subject=Subject(node="node-0", gpu="GPU-1"),
        since=9.0,
        summary="XID 79: GPU fell off the bus",
        action="drain_node",
    )
    return Snapshot(
        tick=1,
        t=10.0,
        deployments=state.deployments(),
        replicas=state.replicas(),
        gpus=state.gpus(),
        decisions={"llm/chat": decision},
        findings=[finding],
    )


def test_view_shows_decision_forecast_finding_and_events():
    text = _render(_snapshot(), [Event(5.0, "injected XID 79 on node-0/0")])
    assert "llm/chat" in text
    assert "1/3" in text  # ready/desired
    assert "4.50 (≤6.00)" in text  # forecast with its upper band
    assert "demand rising" in text
    assert "XID 79: GPU fell off the bus" in text
    assert "drain_node" in text
    assert "injected XID 79 on node-0/0" in text


def test_unknown_values_render_as_dash_not_zero():
    assert fmt(None, pct=True) == "–"
    assert fmt(0.0, ".0f", pct=True) == "0%"
    console = Console(width=200, record=True, color_system=None)
    console.print(replicas_table(_snapshot()))
    row = next(line for line in console.export_text().splitlines() if "chat-0" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    header = ["replica", "node", "engine", "state", "waiting", "running", "KV", "prefix hit", "tok/s out"]
    by_col = dict(zip(header, cells, strict=True))
    assert by_col["waiting"] == "7"
    assert by_col["KV"] == "–"  # the engine did not export KV usage


def test_before_the_first_tick_the_view_says_it_is_waiting():
    assert "waiting for the first complete tick" in _render(None, [])


def test_a_ready_replica_making_no_progress_is_not_counted_as_serving():
    # Two scrapes with frozen counters while 3 requests run: ready to Kubernetes, serving nobody.
    from kvpilot.demo.view import serving_replicas, status_line

    state = FleetState()
    for t in (0.0, 5.0, 10.0):
        samples = [
            ReplicaSample(
                namespace="llm",
                deployment="chat",
                replica=name,
                node="node-0",
                engine="vllm",
                model="llama",
                timestamp=t,
                requests_waiting=4,
                requests_running=3,
                generation_tokens=tokens,
                requests_finished=tokens / 100,
            )
            for name, tokens in (("stuck", 500.0), ("fine", 500.0 + 100 * t))
        ]
        state.observe(samples, [], now=t)
    snap = Snapshot(tick=3, t=10.0, deployments=state.deployments(), replicas=state.replicas())
    assert state.deployments()["llm/chat"].ready_replicas == 2
    assert serving_replicas(snap) == serving_replicas(snap, "llm/chat") == 1
    assert "serving=1" in status_line(snap, "demo · t=10s")
    console = Console(width=200, record=True, color_system=None)
    console.print(replicas_table(snap))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if "│" in line}
    assert "no progress" in rows["stuck"]
    assert "ready" in rows["fine"]
