"""`kvpilot demo` end to end: the real service watches the live simulator, flags an injected XID and scales."""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import threading

import httpx
import pytest

from kvpilot.demo import DemoConfig, ScheduledFault, run_demo
from kvpilot.view import status_line

pytestmark = pytest.mark.e2e


def test_demo_flags_an_injected_xid_and_serves_the_api():
    seen: dict[str, object] = {"lines": [], "api": None}

    def on_update(snap, events, header):
        if snap is not None:
            seen["lines"].append(status_line(snap, header))
        if seen["api"] is None and "API http" in header:
            seen["api"] = header.split("API ", 1)[1].split("/docs", 1)[0]

    cfg = DemoConfig(
        speed=20.0,
        duration_s=25.0,
        faults=(ScheduledFault(60, {"type": "xid", "node": "node-0", "gpu": 0, "xid": 79}, "XID 79"),),
    )
    summary = asyncio.run(run_demo(cfg, on_update=on_update))
    assert summary.faults_injected == 1
    assert summary.requests_arrived > 100  # the Azure conversation trace was replayed
    assert summary.finding_kinds.get("stuck_gpu", 0) >= 1, summary.finding_kinds
    assert summary.simulated_s >= 300  # 25 s wall at 20x, minus start-up
    assert any("inference/llama: ready=" in line for line in seen["lines"])
    assert seen["api"] is not None


def test_demo_api_answers_while_running():
    # The demo runs in its own thread and event loop, as under `kvpilot demo`; the test is the operator's curl.
    urls: queue.Queue[str] = queue.Queue()
    stop_holder: dict[str, object] = {}

    def on_update(snap, events, header):
        if snap is not None and urls.empty():
            urls.put(header.split("API ", 1)[1].split("/docs", 1)[0])

    async def main():
        stop_holder["loop"], stop_holder["stop"] = asyncio.get_running_loop(), asyncio.Event()
        cfg = DemoConfig(speed=20.0, duration_s=60.0, faults=())
        await run_demo(cfg, on_update=on_update, stop=stop_holder["stop"])

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    try:
        url = urls.get(timeout=60)
        r = httpx.get(f"{url}/v1/deployments", timeout=10)
        assert r.status_code == 200
        assert "inference/llama" in r.text
    finally:
        while "stop" not in stop_holder:
            thread.join(0.1)
        stop_holder["loop"].call_soon_threadsafe(stop_holder["stop"].set)
        thread.join(60)
    assert not thread.is_alive()


def test_cli_runs_to_a_summary_and_refuses_bad_arguments():
    ok = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "demo", "--duration", "6", "--speed", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "kvpilot demo — summary" in ok.stdout
    assert "requests arrived" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "demo", "--trace", "/nonexistent.csv"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "trace not found: /nonexistent.csv" in bad.stderr
