"""`kvpilot gpu-agent`: NVML readings served as a dcgm-exporter page, read back by kvpilot's dcgm adapter.

The round trip runs on what NVML answered on a real H200 (tests/fixtures/nvml/, replayed) and on stub GPUs with
every field NVML can leave unknown; the HTTP agent is started on loopback and fed good and bad requests.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pynvml as real
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.adapt import adapt_page
from collector.clock import VirtualClock
from collector.gpus.agent import GpuAgent, make_server
from collector.gpus.nvml import NvmlCollector
from collector.gpus.nvml_page import TEXT_CONTENT_TYPE, render_nvml_page
from collector.samples import GpuSample, TargetInfo
from collector.scrape import Collector
from detectors.xid import Triage, XidClass, triage
from tests.unit.collector.test_nvml import FakeGpu, make_nvml, xid
from tests.unit.collector.test_nvml_recorded import FIXTURES, load, replay

TARGET = TargetInfo(url="http://node-1:9400/metrics", kind="gpu")  # static: no node from discovery
# GpuSample.extra keys the page carries (the collector's per-bit clock flags are the bitmask's, not repeated)
PAGE_EXTRA = ("clock_event_reasons", "gpu_lost", "nvml_errors", "retired_pages_pending")


def read_back(page: bytes, timestamp: float) -> list[GpuSample]:
    adapted = adapt_page(page, TARGET, timestamp, content_type=TEXT_CONTENT_TYPE)
    assert adapted.engine is None
    return adapted.gpus


def assert_same(original: GpuSample, back: GpuSample) -> None:
    want = dataclasses.asdict(original)
    got = dataclasses.asdict(back)
    want_extra, got_extra = want.pop("extra"), got.pop("extra")
    assert got == want
    assert got_extra == {k: v for k, v in want_extra.items() if k in PAGE_EXTRA}


@pytest.mark.parametrize("phase", ["idle", "busy"])
def test_h200_readings_survive_the_page(phase: str) -> None:
    record = load("h200")
    collector = NvmlCollector("gpu-node-7", nvml=replay(record["calls"]))
    for p in ("idle", "busy"):
        (sample,) = collector.collect(record["phases"][p]["samples"][0]["timestamp"])
        if p == phase:
            break
    (back,) = read_back(render_nvml_page([sample]), sample.timestamp)
    assert_same(sample, back)
    assert back.node == "gpu-node-7"  # no node from discovery: the page's Hostname


def test_xids_and_the_recovery_action_reach_the_adapter() -> None:
    # dcgm-exporter's XID gauge keeps the last XID; the agent also counts every one NVML queued since it started
    g0, g1 = FakeGpu("GPU-0", recovery=2), FakeGpu("GPU-1", name='Odd "name"\\ here')
    nvml = make_nvml([g0, g1])
    collector = NvmlCollector("n", nvml=nvml)
    collector.start()
    nvml.events.extend([xid(g0, 13), xid(g0, 79)])
    samples = collector.collect(5.0)
    back = read_back(render_nvml_page(samples), 5.0)
    assert [(b.last_xid, b.xid_count, b.recovery_action) for b in back] == [(79, 2.0, 2), (0, 0.0, 0)]
    assert back[1].model_name == 'Odd "name"\\ here'
    for s, b in zip(samples, back, strict=True):
        assert_same(s, b)


_UNSUPPORTED = st.sampled_from(
    [
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceRegisterEvents",
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    unsupported=st.lists(st.sets(_UNSUPPORTED, max_size=10), min_size=1, max_size=3),
    lost=st.lists(st.booleans(), min_size=3, max_size=3),
    used=st.integers(0, 200 * 2**30),
    power_mw=st.integers(0, 2_000_000),
    recovery=st.one_of(st.none(), st.integers(0, 4)),
)
def test_any_mix_of_unknown_fields_round_trips(
    unsupported: list[set[str]], lost: list[bool], used: int, power_mw: int, recovery: int | None
) -> None:
    # an unknown field stays unknown (absent from the page, None back), never 0; a lost GPU stays flagged
    gpus = []
    for i, names in enumerate(unsupported):
        errors = {n: real.NVML_ERROR_NOT_SUPPORTED for n in names}
        if lost[i]:
            errors["nvmlDeviceGetUtilizationRates"] = real.NVML_ERROR_GPU_IS_LOST
        gpus.append(FakeGpu(f"GPU-{i}", used=used, power_mw=power_mw, recovery=recovery, errors=errors))
    samples = NvmlCollector("n", nvml=make_nvml(gpus)).collect(1.0)
    back = read_back(render_nvml_page(samples), 1.0)
    assert len(back) == len(samples)
    for s, b in zip(samples, back, strict=True):
        assert_same(s, b)


@pytest.fixture
def agent_url() -> Iterator[tuple[str, int, dict[str, Any]]]:
    state: dict[str, Any] = {"gpus": [FakeGpu("GPU-a", util_pct=42)]}

    class Switchable:
        """make_nvml per request, so a test can break NVML under a running agent."""

        def __getattr__(self, name: str) -> Any:
            return getattr(state["module"], name)

    state["module"] = make_nvml(state["gpus"])
    agent = GpuAgent("node-1", nvml=Switchable(), clock=lambda: 100.0)  # type: ignore[arg-type]
    server = make_server(agent, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_port, state
    finally:
        server.shutdown()
        server.server_close()


def request(host: str, port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_agent_serves_the_page_and_refuses_the_rest(agent_url: tuple[str, int, dict[str, Any]]) -> None:
    host, port, _ = agent_url
    status, headers, body = request(host, port, "GET", "/metrics")
    assert status == 200
    assert headers["Content-Type"] == TEXT_CONTENT_TYPE
    (gpu,) = read_back(body, 100.0)
    assert (gpu.node, gpu.uuid, gpu.utilisation) == ("node-1", "GPU-a", 0.42)
    assert request(host, port, "GET", "/healthz")[:1] == (200,)
    status, _, body = request(host, port, "GET", "/nothing")
    assert (status, body) == (404, b"not found: GET /metrics or /healthz\n")
    status, headers, _ = request(host, port, "POST", "/metrics")
    assert (status, headers["Allow"]) == (405, "GET")


def test_agent_says_why_when_nvml_fails(agent_url: tuple[str, int, dict[str, Any]]) -> None:
    host, port, state = agent_url
    state["module"] = make_nvml([], init_error=real.NVML_ERROR_DRIVER_NOT_LOADED)
    for path in ("/metrics", "/healthz"):
        status, _, body = request(host, port, "GET", path)
        assert status == 503
        assert body == b"node node-1: NVML initialisation failed: Driver Not Loaded\n"
    state["module"] = make_nvml(state["gpus"])  # the driver is back: the next scrape works
    assert request(host, port, "GET", "/metrics")[0] == 200


def test_agent_survives_garbage_on_the_socket(agent_url: tuple[str, int, dict[str, Any]]) -> None:
    host, port, _ = agent_url
    for junk in (b"\x00\xff garbage\r\n\r\n", b"GET " + b"/" * 70_000 + b" HTTP/1.1\r\n\r\n", b"\r\n"):
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(200)
        assert answer == b"" or answer.startswith(b"HTTP/1.")
        if answer:
            assert int(answer.split()[1]) in (400, 414)
    assert request(host, port, "GET", "/metrics")[0] == 200


def test_h200_capture_of_the_agent_matches_the_collector() -> None:
    # `python3 -m collector.gpus.agent --node lent-h200` ran on the H200 right after scripts/nvml_record.py and was
    # fetched over HTTP: the real agent's page, read by the real adapter, is that GPU as NVML recorded it
    (gpu,) = read_back((FIXTURES / "h200" / "agent_metrics.txt").read_bytes(), 0.0)
    record = json.loads((FIXTURES / "h200" / "nvml_record.json").read_text())
    idle = record["phases"]["idle"]["samples"][0]
    assert gpu.node == "lent-h200"
    assert (gpu.uuid, gpu.model_name) == (idle["uuid"], idle["model_name"])
    assert (gpu.last_xid, gpu.xid_count, gpu.recovery_action) == (0, 0.0, 0)
    assert gpu.memory_used_bytes is not None
    assert gpu.memory_free_bytes is not None
    total = idle["memory_used_bytes"] + idle["memory_free_bytes"]
    assert abs(gpu.memory_used_bytes + gpu.memory_free_bytes - total) <= 2**20


async def test_scraped_agent_gives_the_xid_triage_what_dcgm_exporter_cannot() -> None:
    # The path a user runs: the agent on a node, kvpilot's collector scraping it as a GPU target, the XID triage on
    # what comes back. XID 154 needs NVML's recovery action (dcgm-exporter has none: "unknown", notify only); a GSP
    # XID needs the count of recent ones (the agent counts every one it drained).
    g0, g1 = FakeGpu("GPU-0", recovery=2), FakeGpu("GPU-1")
    nvml = make_nvml([g0, g1])
    agent = GpuAgent("gpu-node-3", nvml=nvml, clock=lambda: 50.0)
    agent.collector.start()
    nvml.events.extend([xid(g0, 154), xid(g1, 119), xid(g1, 119)])
    server = make_server(agent, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = TargetInfo(url=f"http://127.0.0.1:{server.server_port}/metrics", kind="gpu", node="gpu-node-3")
        async with Collector(clock=VirtualClock(60.0)) as c:
            result = await c.collect_once([target])
    finally:
        server.shutdown()
        server.server_close()
    assert [r.error for r in result.results] == [None]
    assert result.gpu_nodes_scraped == {"gpu-node-3"}
    assert [g.node for g in result.gpus] == ["gpu-node-3", "gpu-node-3"]
    by_uuid = {g.uuid: triage(g) for g in result.gpus}
    assert by_uuid["GPU-0"] == Triage(154, XidClass.DRAIN, "drain_node", "XID 154 with NVML recovery action 2")
    assert by_uuid["GPU-1"] == Triage(119, XidClass.DRAIN, "drain_node", "XID 119 (GSP) recurring")
