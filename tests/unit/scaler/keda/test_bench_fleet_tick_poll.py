"""bench/fleet_scale.py's tick timing against a stand-in kvpilot (a loopback HTTP server whose tick counter moves
every 0.7 s): `--tick-poll metrics` reads /metrics at every poll, `--tick-poll readyz` reads /readyz and asks for
/metrics only once `last_tick_at` moved — the same ticks and durations, from about one /metrics a tick."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.helpers.bench import load_bench

TICK_S = 0.7
DURATION_S = 0.25


class _Kvpilot:
    def __init__(self) -> None:
        self.count = 0
        self.t = 0.0
        self.asked: dict[str, int] = {}
        self.lock = threading.Lock()

    def tick(self) -> None:
        with self.lock:
            self.count += 1
            self.t = time.time()


def _handler(state: _Kvpilot) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            with state.lock:
                state.asked[path] = state.asked.get(path, 0) + 1
                count, t = state.count, state.t
            if path == "/metrics":
                body = (
                    f"kvpilot_loop_tick_seconds_count {count}\nkvpilot_loop_tick_seconds_sum {count * DURATION_S}\n"
                    "kvpilot_loop_overruns_total 0\n"
                ).encode()
            elif path == "/readyz":
                body = json.dumps({"status": "ok", "last_tick_at": t if count else None}).encode()
            else:
                body = b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def kvpilot() -> Iterator[tuple[_Kvpilot, str]]:
    state = _Kvpilot()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    stop = threading.Event()

    def ticks() -> None:
        while not stop.wait(TICK_S):
            state.tick()

    threads = [threading.Thread(target=server.serve_forever, daemon=True), threading.Thread(target=ticks, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()


@pytest.mark.parametrize("tick_poll", ["metrics", "readyz"])
def test_ticks_are_timed_alike_and_readyz_asks_metrics_about_once_a_tick(
    kvpilot: tuple[_Kvpilot, str], tick_poll: str
) -> None:
    fleet_scale = load_bench("fleet_scale")
    state, base = kvpilot
    run = fleet_scale.Run(10, "aggregates")
    measure = fleet_scale._measure(run, base, os.getpid(), 4, TICK_S, 1, api_load=False, tick_poll=tick_poll)
    asyncio.run(asyncio.wait_for(measure, 60))
    assert len(run.ticks) == 4
    assert [d for _, d in run.ticks] == pytest.approx([DURATION_S] * 4)
    ends = [end for end, _ in run.ticks]
    assert all(b > a for a, b in itertools.pairwise(ends))
    polls = state.asked.get("/metrics", 0)
    if tick_poll == "readyz":
        assert state.asked["/readyz"] >= 4
        assert polls <= 5 + 3  # the first read, then about one a tick (one more when a tick lands in between)
    else:
        assert "/readyz" not in state.asked
        assert polls >= 6  # every 0.5 s over ~5 ticks of 0.7 s
