"""The live server on loopback: discovery documents, metrics per replica and node, control API and its errors."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import Fleet, FleetConfig, load_trace
from simulator.server import LiveFleet, make_server

# One client for the module: httpx.get() and httpx.post() build a client (and its TLS context) per call, ~45 ms on
# the CI runner, which the hypothesis tests below paid on every example. The server sets no cookies: nothing of one
# request carries into the next.
HTTP = httpx.Client(timeout=5.0)


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[str, LiveFleet]]:
    fleet = Fleet(FleetConfig(replicas=2, cold_start_s=30), load_trace("synthetic:duration_s=3600,rate=4"))
    live = LiveFleet(fleet, engine="vllm", speed=1.0)
    server = make_server(live)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    with live.lock:  # drive virtual time directly: the background ticker stays off in tests
        fleet.advance_to(60)
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}", live
    server.shutdown()


def test_targets_list_every_replica_and_node(base: tuple[str, LiveFleet]) -> None:
    url, _ = base
    targets = HTTP.get(f"{url}/targets").json()
    kinds = sorted((t["kind"], t["pod"]) for t in targets)
    assert kinds == [("dcgm", "dcgm-exporter-node-0"), ("engine", "llama-0000"), ("engine", "llama-0001")]
    for t in targets:
        assert set(t) == {"url", "kind", "engine", "namespace", "deployment", "pod", "node", "ready"}
        assert t["ready"] is True
        assert HTTP.get(t["url"]).status_code == 200


def test_a_loading_replica_is_listed_not_ready_like_a_pod_before_its_readiness_probe() -> None:
    fleet = Fleet(FleetConfig(replicas=1, cold_start_s=120), load_trace("synthetic:duration_s=3600,rate=1"))
    live = LiveFleet(fleet)
    server = make_server(live)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        with live.lock:
            fleet.advance_to(10)
            fleet.set_replicas(2)
            fleet.advance_to(20)  # the new replica is 10 s into a 120 s cold start
        host, port = server.server_address[:2]
        engines = [t for t in HTTP.get(f"http://{host}:{port}/targets").json() if t["kind"] == "engine"]
        assert {t["pod"]: t["ready"] for t in engines} == {"llama-0000": True, "llama-0001": False}
        loading = next(t for t in engines if not t["ready"])
        assert HTTP.get(loading["url"]).status_code == 503
    finally:
        server.shutdown()


def test_sd_is_prometheus_http_sd(base: tuple[str, LiveFleet]) -> None:
    url, _ = base
    groups = HTTP.get(f"{url}/sd").json()
    host = url.split("://")[1]
    assert all(g["targets"] == [host] for g in groups)
    paths = {g["labels"]["__metrics_path__"] for g in groups}
    assert "/replicas/llama-0000/metrics" in paths
    assert "/nodes/node-0/metrics" in paths


def test_replica_metrics_are_vllm_text(base: tuple[str, LiveFleet]) -> None:
    url, _ = base
    r = HTTP.get(f"{url}/replicas/llama-0000/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "vllm:num_requests_running{" in r.text


def test_scale_up_then_loading_replica_answers_503(base: tuple[str, LiveFleet]) -> None:
    url, live = base
    state = HTTP.post(f"{url}/control/replicas", json={"count": 3}).json()
    assert [r["state"] for r in state["replicas"]] == ["ready", "ready", "loading"]
    assert HTTP.get(f"{url}/replicas/llama-0002/metrics").status_code == 503
    with live.lock:
        live.fleet.advance_to(live.fleet.time + 31)
    assert HTTP.get(f"{url}/replicas/llama-0002/metrics").status_code == 200


def test_fault_injection_shows_in_state(base: tuple[str, LiveFleet]) -> None:
    url, _ = base
    r = HTTP.post(f"{url}/control/faults", json={"type": "xid", "node": "node-0", "gpu": 0, "xid": 79})
    assert r.status_code == 200
    gpus = HTTP.get(f"{url}/control/state").json()["gpus"]
    assert gpus[0]["last_xid"] == 79
    assert gpus[0]["vanished"]
    HTTP.post(f"{url}/control/faults", json={"type": "recover", "node": "node-0", "gpu": 0})


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/control/replicas", b"{nope", 400, "not JSON"),  # malformed JSON
        ("/control/replicas", b'{"count": -1}', 400, "count"),  # negative count
        ("/control/replicas", b'{"count": true}', 400, "count"),  # a bool is not a count
        ("/control/faults", b'{"type": "meteor"}', 400, "unknown fault type"),  # unknown fault
        ("/control/faults", b'{"type": "xid", "node": "node-0", "gpu": 0}', 400, "xid"),  # missing field
        ("/control/faults", b'{"type": "hung_gpu", "node": "node-7", "gpu": 0}', 400, "node-7"),  # unknown node
        ("/control/faults", b'{"type": "crash", "replica": 3}', 400, "replica"),  # wrong type
        ("/control/faults", b'{"type": "hung_gpu", "node": "node-0", "gpu": Infinity}', 400, "gpu"),  # not finite
        ("/control/faults", b"[]", 400, "JSON object"),  # not an object
        ("/control/nothing", b"{}", 404, "no route"),  # unknown path
    ],
)
def test_garbage_gets_json_errors(
    base: tuple[str, LiveFleet], path: str, body: bytes, status: int, message: str
) -> None:
    url, _ = base
    r = HTTP.post(f"{url}{path}", content=body)
    assert r.status_code == status
    assert message in r.json()["error"]


@pytest.mark.parametrize("path", ["/replicas/nobody/metrics", "/nodes/node-9/metrics", "/metrics", "/replicas"])
def test_unknown_paths_are_404(base: tuple[str, LiveFleet], path: str) -> None:
    url, _ = base
    assert HTTP.get(f"{url}{path}").status_code == 404


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=8,
)


@settings(max_examples=80, deadline=None)
@given(
    body=st.one_of(
        _json,
        st.fixed_dictionaries(
            {"type": st.sampled_from(["xid", "crash", "kv_pressure", "routing", "hung_gpu"])},
            optional={
                "node": st.text(max_size=8),
                "gpu": _json,
                "xid": _json,
                "count": _json,
                "routing": _json,
                "replica": _json,
            },
        ),
    )
)
def test_fault_endpoint_answers_200_or_json_400(base: tuple[str, LiveFleet], body: object) -> None:  # fmt: skip
    url, _ = base
    if isinstance(body, dict) and body.get("type") == "kv_pressure":
        body = {**body, "count": 1}  # keep the fleet light across examples
    r = HTTP.post(f"{url}/control/faults", content=json.dumps(body))
    assert r.status_code in (200, 400)
    if r.status_code == 400:
        assert isinstance(r.json()["error"], str)
    HTTP.post(f"{url}/control/faults", json={"type": "routing", "routing": "round_robin"})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["replicas", "nodes", "metrics", "control", "state", "llama-0000", "node-0", "..",
                                 "%00", "sd", "targets", "x" * 300]), max_size=4))  # fmt: skip
def test_any_get_path_answers_cleanly(base: tuple[str, LiveFleet], parts: list[str]) -> None:
    url, _ = base
    r = HTTP.get(f"{url}/{'/'.join(parts)}")
    assert r.status_code in (200, 404, 503)
    if r.status_code != 200:
        assert "error" in r.json()


@pytest.mark.parametrize(("error", "told"), [(BrokenPipeError(32, "Broken pipe"), False), (ValueError("bug"), True)])
def test_a_scraper_hanging_up_is_not_reported_but_a_fault_is(
    error: Exception, told: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # under a large simulated fleet, scrapers that time out hang up mid-answer: the demo printed a traceback for each
    fleet = Fleet(FleetConfig(replicas=1), load_trace("synthetic:duration_s=60,rate=1"))
    server = make_server(LiveFleet(fleet, engine="vllm", speed=1.0))
    try:
        try:
            raise error
        except Exception:
            server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server.server_close()
    assert ("Traceback" in capsys.readouterr().err) is told


def test_a_whole_fleets_scrapes_at_once_wait_in_the_listen_queue() -> None:
    # A scraper opens one connection per page at once (kvpilot's collector: ~90 for an 80-replica demo). With
    # socketserver's backlog of 5 the kernel dropped the connects past it while the accept loop was busy, each then
    # waited out TCP's 1 s / 3 s SYN retransmits, and the demo's 4.5 s scrapes reported healthy replicas down.
    # Here nothing accepts until every connect is made: each must complete in the queue, not hang.
    fleet = Fleet(FleetConfig(replicas=1), load_trace("synthetic:duration_s=60,rate=1"))
    server = make_server(LiveFleet(fleet, engine="vllm", speed=1.0))
    address = server.server_address[:2]
    conns: list[socket.socket] = []
    try:
        for _ in range(100):
            conns.append(socket.create_connection(address, timeout=0.5))
    except OSError:
        for conn in conns:
            conn.close()
        server.server_close()
        raise
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        for conn in conns:
            conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        for conn in conns:
            conn.settimeout(5.0)
            assert conn.makefile("rb").readline().startswith(b"HTTP/1.0 200")
    finally:
        for conn in conns:
            conn.close()
        server.shutdown()
        server.server_close()
