"""Evicting a stuck replica (what a drain does to its pod): traffic steered away, its requests retried, a
replacement on a healthy GPU, every request served in the end; and the /control/evict route."""

from __future__ import annotations

import threading

import httpx
import pytest

from simulator import Fleet, FleetConfig, load_trace, parse_fault
from simulator.trace import Trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_trace("synthetic:duration_s=600,rate=6", seed=1)


def _hung_fleet(trace: Trace, xid: int | None = None) -> Fleet:
    f = Fleet(FleetConfig(replicas=2, cold_start_s=60, routing="round_robin"), trace)
    f.advance_to(100)
    fault = (
        {"type": "xid", "node": "node-0", "gpu": 0, "xid": xid}
        if xid
        else {"type": "hung_gpu", "node": "node-0", "gpu": 0}
    )
    f.inject(parse_fault(fault))
    f.advance_to(160)
    return f


def test_a_hung_replica_keeps_its_stranded_queue_until_evicted(trace: Trace) -> None:
    f = _hung_fleet(trace)
    hung = next(r for r in f.snapshot().replicas if r.state == "hung")
    assert hung.requests_waiting + hung.requests_running > 10  # round-robin kept sending it half the traffic
    stranded = [a for a, first in f.in_flight() if first is None]
    assert len(stranded) >= hung.requests_waiting


@pytest.mark.parametrize("xid", [None, 79])  # a hang without an XID, and a GPU that fell off the bus
def test_eviction_retries_the_stranded_requests_and_replaces_the_pod_on_a_healthy_gpu(trace: Trace, xid) -> None:
    f = _hung_fleet(trace, xid)
    hung = next(r for r in f.snapshot().replicas if r.state == "hung")
    held = hung.requests_waiting + hung.requests_running
    arrivals = f.snapshot().arrivals_total
    assert f.evict(hung.name) == held
    snap = f.snapshot()
    assert hung.name not in {r.name for r in snap.replicas}
    assert len(snap.replicas) == 2  # the ReplicaSet keeps the count
    new = next(r for r in snap.replicas if r.state == "loading")
    bad = next(g for g in snap.gpus if g.node == "node-0" and g.index == 0)
    assert bad.pod == ""
    assert new.gpu_uuids != (bad.uuid,)
    # Nothing goes to the evicted replica any more, and every request (the retried ones too) is served.
    f.advance_to(trace.duration_s + 400)
    assert f.snapshot().arrivals_total >= arrivals
    assert f.in_flight() == []
    done = f.finished()
    assert len(done) == f.snapshot().arrivals_total
    assert hung.name not in {d.replica for d in done if d.arrival_s > 160}
    retried = [d for d in done if 100 <= d.arrival_s < 160 and d.ttft_s > 160 - d.arrival_s]
    assert retried  # the stranded ones waited through the hang: their wait is in their TTFT


def test_unknown_replica_is_a_key_error(trace: Trace) -> None:
    f = Fleet(FleetConfig(replicas=1), trace)
    with pytest.raises(KeyError, match="no replica 'nope'"):
        f.evict("nope")


def test_fluid_eviction_replaces_the_pod(trace: Trace) -> None:
    f = Fleet(FleetConfig(replicas=2, fidelity="fluid", cold_start_s=60), trace)
    f.advance_to(100)
    name = f.snapshot().replicas[0].name
    assert f.evict(name) == 0
    states = sorted(r.state for r in f.snapshot().replicas)
    assert states == ["loading", "ready"]


def test_evict_route(trace: Trace) -> None:
    from simulator.server import LiveFleet, make_server

    live = LiveFleet(_hung_fleet(trace))
    server = make_server(live)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        hung = next(r["name"] for r in httpx.get(f"{base}/control/state").json()["replicas"] if r["state"] == "hung")
        ok = httpx.post(f"{base}/control/evict", json={"replica": hung})
        assert ok.status_code == 200
        assert ok.json()["evicted"] == hung
        assert ok.json()["requests_retried"] > 0
        missing = httpx.post(f"{base}/control/evict", json={"replica": hung})
        assert missing.status_code == 404
        assert "no replica" in missing.json()["error"]
        bad = httpx.post(f"{base}/control/evict", json={"name": hung})
        assert bad.status_code == 400
        live.advance_to(live.fleet.time + 5)  # lockstep callers move time themselves
        assert live.fleet.time == 165
    finally:
        server.shutdown()
