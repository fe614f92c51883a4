"""The largest pages the cap allows never make the API wait: four 7.5 MB /metrics pages are scraped every tick by
the collector `kvpilot run` uses (pages read off the event loop), while /healthz is timed over HTTP. The pages come
from a separate process, as exporters do (a server thread in the test process would compete for its GIL)."""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from collector.clock import WallClock
from collector.samples import TargetInfo
from collector.scrape import Collector, ScrapeConfig
from tests.helpers.gated_read import GATE_S, gated_adapt_page, open_gate, waiting_reads
from tests.helpers.poll import wait_for
from tests.reliability.conftest import Recorder, Store
from tests.reliability.harness import running
from tests.services.ports import free_port

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "metrics" / "vllm-hybrid-kv__handwritten.txt"
PAGE_BYTES = 7_500_000  # under the 8 MiB page cap of `kvpilot run`


def _big_page() -> bytes:
    """A real-format vLLM page padded with a family kvpilot does not read (the parser still has to get past it)."""
    head = FIXTURE.read_bytes() if FIXTURE.exists() else b'vllm:num_requests_running{model_name="m"} 1\n'
    lines, size, i = [head, b"# TYPE padding_series gauge\n"], len(head), 0
    while size < PAGE_BYTES:
        line = f'padding_series{{shard="{i}",pod="replica-{i % 97}",zone="z{i % 7}"}} {i}.5\n'.encode()
        lines.append(line)
        size, i = size + len(line), i + 1
    return b"".join(lines)


def test_healthz_answers_while_the_largest_pages_are_read(store: Store, record: Recorder, tmp_path: Path) -> None:
    page = _big_page()
    for i in range(4):
        (tmp_path / f"p{i}").write_bytes(page)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _up(f"http://127.0.0.1:{port}/p0"), timeout_s=20, what="the page server")
        targets = [
            TargetInfo(
                url=f"http://127.0.0.1:{port}/p{i}", engine="vllm", namespace="llm", deployment="big", pod=f"big-{i}"
            )
            for i in range(4)
        ]
        interval = 2.0
        gates = tmp_path / "gates"
        gates.mkdir()
        collector = Collector(
            ScrapeConfig.for_interval(interval, 1.5, max_bytes=8 * 1024 * 1024, max_concurrency=4),
            clock=WallClock(),
            adapt=functools.partial(gated_adapt_page, str(gates)),
        )
        with running(store.url, interval_s=interval, fleet=collector, static=targets) as r, r.client() as c:
            # The first reads wait at a gate (tests/helpers/gated_read.py) that opens once /healthz answered five
            # times while one read waited: off the loop it answers at once; parsed on the loop it could answer only
            # between reads (one read's wait is told from the next one's), never during one, and the test fails.
            wait_for(lambda: waiting_reads(gates), timeout_s=60, what="a page read waiting at the gate")
            during_a_read = 0
            give_up = time.monotonic() + 4 * GATE_S  # only ends a failing run: on the loop, each read waits GATE_S
            while during_a_read < 5 and time.monotonic() < give_up:
                before = waiting_reads(gates)
                assert c.get("/healthz").status_code == 200
                during_a_read += bool(before & waiting_reads(gates))
            open_gate(gates)
            wait_for(lambda: r.ticks() >= 2, timeout_s=60, what="two ticks with the big pages")
            latencies = []
            deadline = time.monotonic() + 3 * interval
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                assert c.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - t0)
                time.sleep(0.02)
            p99 = statistics.quantiles(latencies, n=100)[98]
            # The goal is 50 ms (met in CI: 6-8 ms), reported, not asserted: a loaded runner stretches any
            # latency (a 250 ms bound failed at 425 ms with two test processes on one core). What separates "read
            # off the loop" from "parsed on it" is asserted instead, without a clock: answers during a read.
            record(
                "/healthz while four 7.5 MB pages are read each tick",
                ">= 5 answers during a read (p99 goal 50 ms)",
                f"{during_a_read} during a read; p99 {p99 * 1000:.1f} ms over {len(latencies)} calls "
                f"({'met' if p99 < 0.05 else 'missed'} 50 ms)",
                during_a_read >= 5,
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


def _up(url: str) -> bool:
    try:
        return httpx.head(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
