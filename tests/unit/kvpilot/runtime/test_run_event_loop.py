"""`kvpilot run` as a real process on each event loop (`runtime.event_loop`): the log line at start names the loop,
and on uvloop everything that touches the loop still works: the HTTP API, the KEDA gRPC server in the loop's process
(grpc.aio), the scrapes (asyncio streams), a large page read in the reader process (``run_in_executor`` on a spawned
``ProcessPoolExecutor``), worker threads, and SIGTERM's handler (``loop.add_signal_handler``)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.poll import wait_for
from tests.services.pages import serve_pages
from tests.services.ports import free_port
from tests.unit.kvpilot.runtime.test_service_run import _keda_desired, _ready, kvpilot_run

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "metrics"
VLLM_PAGE = (FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_bytes()


def _started_on(tmp: Path) -> str:
    for line in next(tmp.glob("run-*.log")).read_text().splitlines():
        if "kvpilot running:" in line:
            return line.rsplit("event loop ", 1)[-1].strip()
    raise AssertionError("no start line in the log")


@pytest.mark.parametrize("choice", ["auto", "uvloop", "asyncio"])
def test_run_serves_and_stops_on_the_chosen_loop(tmp_path: Path, choice: str) -> None:
    if choice != "asyncio":
        pytest.importorskip("uvloop")  # `auto` falls back to asyncio without it (test_event_loop.py)
    grpc_port = free_port()
    env = {
        "KVPILOT_RUNTIME__EVENT_LOOP": choice,
        "KVPILOT_GRPC_PORT": str(grpc_port),
        "KVPILOT_KEDA__SERVE_FROM": "loop",  # grpc.aio on the loop under test
    }
    with kvpilot_run(tmp_path, env=env) as (proc, url):
        _ready(url, proc)
        assert _started_on(tmp_path) == ("asyncio" if choice == "asyncio" else "uvloop")
        assert "kvpilot_scrape_up" in httpx.get(f"{url}/metrics").text
        assert [d["key"] for d in httpx.get(f"{url}/v1/deployments").json()["items"]] == ["inference/llama"]
        assert _keda_desired(grpc_port) >= 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    log = next(tmp_path.glob("run-*.log")).read_text()
    assert "SIGTERM: abandoning the tick in progress, flushing the store, stopping" in log
    assert "kvpilot stopped" in log
    assert "Traceback" not in log


@pytest.fixture
def large_page_url() -> Iterator[str]:
    """A vLLM page grown past the 128 KiB read on the loop (unwanted families), so it is read in the reader
    process."""
    padding = b"".join(b'bench_padding_total{i="%d"} %d\n' % (i, i) for i in range(6000))
    page = VLLM_PAGE + b"# TYPE bench_padding_total counter\n" + padding
    assert len(page) > 128 * 1024

    with serve_pages({"/metrics": page}) as (host, port):
        yield f"http://{host}:{port}/metrics"


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


def test_a_large_page_is_read_in_the_reader_process_on_uvloop(tmp_path: Path, large_page_url: str) -> None:
    pytest.importorskip("uvloop")
    target = {"url": large_page_url, "kind": "engine", "namespace": "ns", "deployment": "big", "pod": "big-0"}
    config = tmp_path / "kvpilot.yaml"
    config.write_text(
        json.dumps(
            {
                "runtime": {"event_loop": "uvloop"},
                "keda": {"serve_from": "loop"},
                "collector": {"discovery": {"kind": "static", "static_targets": [target]}},
            }
        )
    )
    with kvpilot_run(tmp_path, "--config", str(config)) as (proc, url):
        _ready(url, proc)
        assert _started_on(tmp_path) == "uvloop"

        def live() -> bool:
            items = httpx.get(f"{url}/v1/deployments").json()["items"]
            return [(d["key"], d["live"]) for d in items] == [("ns/big", True)]

        wait_for(live, timeout_s=30, every_s=0.2, what="the large page's deployment live")
        assert _children(proc.pid), "no reader process was started for the large page"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    log = next(tmp_path.glob("run-*.log")).read_text()
    assert "kvpilot stopped" in log
    assert "Traceback" not in log
