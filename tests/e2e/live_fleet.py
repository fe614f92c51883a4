"""Shared by the live end-to-end tests: the simulator's live server in this process, and polling a real Prometheus
until a query has data."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.services.prometheus import Prometheus


@contextmanager
def live_simulator(replicas: int) -> Iterator[str]:
    """The simulator's live server in this process (advancing in a thread); yields its base URL."""
    from simulator import PROFILES, Fleet, FleetConfig, load_trace
    from simulator.server import LiveFleet, make_server

    # gpus_per_node=1: one replica per node, so faults on different nodes hit different replicas
    config = FleetConfig(profile=PROFILES["llama3-8b-h100"], replicas=replicas, gpus_per_node=1)
    live = LiveFleet(Fleet(config, load_trace("synthetic:duration_s=7200,rate=6")), speed=1.0)
    server = make_server(live, "127.0.0.1", 0)
    live.start()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="simulator-http", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        live.stop()


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one series with a finite value (Grafana draws nothing for NaN, e.g. a quantile over no events)."""
    return any(math.isfinite(float(s["value"][1])) for s in result)


def poll(prom: Prometheus, expr: str, deadline: float) -> list[dict[str, Any]]:
    """Query until it has data or the shared deadline passes; the last answer either way."""
    while True:
        result = prom.query(expr)
        if has_data(result) or time.monotonic() >= deadline:
            return result
        time.sleep(1.0)  # one Prometheus scrape interval: the next answer can differ only after a scrape


def static_targets(sim_url: str) -> list[dict[str, Any]]:
    """The simulator's /targets as kvpilot static targets (its `dcgm` kind is kvpilot's `gpu`)."""
    out = []
    for t in httpx.get(f"{sim_url}/targets", timeout=5).json():
        gpu = t["kind"] == "dcgm"
        entry = {k: t[k] for k in ("url", "namespace", "deployment", "pod", "node")}
        entry["kind"] = "gpu" if gpu else "engine"
        if not gpu and t.get("engine"):
            entry["engine"] = t["engine"]
        out.append(entry)
    return out
