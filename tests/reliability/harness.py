"""The whole service as `kvpilot run` assembles it (wiring, control loop, store writer, actuator and drain worker,
the FastAPI app served by uvicorn on loopback) in a background thread with its own event loop, against a real
SQLite file or a real PostgreSQL. Only the fleet is scripted: a collector whose samples advance with the wall
clock, so that ticks are real ticks. Tests talk to it over HTTP, as an operator or an attacker would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from api.auth import TokenAuth
from api.main import create_app
from collector.clock import WallClock
from collector.health import TargetHealth
from collector.samples import ReplicaSample, TargetInfo
from collector.scrape import CollectResult, ScrapeResult
from kvpilot.runtime.http_server import ApiServerConfig, HttpImpl
from kvpilot.runtime.service import Service
from kvpilot.runtime.sources import Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import load_settings
from tests.helpers.poll import until
from tests.services.ports import free_port

READ = "9f2c41d7e3b85a06c1d4f7e2a9b3c580"
ADMIN = "e71a3c95b2d04f68a1c7e3b9d5f20a48"
R = {"Authorization": f"Bearer {READ}"}
A = {"Authorization": f"Bearer {ADMIN}"}

# A discovered target whose URL carries credentials (discovery is not held to the API's checks).
SECRET = "s3cr3t-pw"
ENGINE = TargetInfo(
    url=f"http://probe:{SECRET}@10.0.0.1:8000/metrics", namespace="llm", deployment="chat", pod="chat-0", node="n0"
)


@dataclass
class WallFleet:
    """Two replicas of llm/chat, on n0 and n1; counters advance with the wall clock."""

    started: float = field(default_factory=time.time)
    model: str = "m"

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        t = time.time()
        elapsed = t - self.started
        replicas = tuple(
            ReplicaSample(
                namespace="llm", deployment="chat", replica=pod, node=node, engine="vllm", model=self.model,
                timestamp=t, requests_waiting=1, requests_running=4, kv_usage=0.4,
                requests_finished=4 * elapsed, prompt_tokens=2000 * elapsed, generation_tokens=400 * elapsed,
            )
            for pod, node in (("chat-0", "n0"), ("chat-1", "n1"))
        )  # fmt: skip
        health = TargetHealth(ENGINE.url, True, None, t, 0.01, t, 0, 1, 0)
        return CollectResult(
            timestamp=t,
            results=(ScrapeResult(ENGINE, True, t, 0.01, replicas=replicas, engine="vllm"),),
            health={ENGINE.url: health},
        )


@dataclass
class Running:
    """A started service; ``stop()`` is what SIGTERM does."""

    service: Service
    base: str
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    startup_s: float

    def client(self, timeout_s: float = 20.0) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=timeout_s, trust_env=False)

    def ticks(self) -> int:
        return self.service.loop.tick_count

    def stop(self, *, timeout_s: float = 30.0) -> float:
        """Set the stop flag (as the SIGTERM handler does); returns seconds until everything ended."""
        t0 = time.monotonic()
        self.loop.call_soon_threadsafe(self.service.stop.set)
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise AssertionError(f"the service did not stop within {timeout_s} s")
        return time.monotonic() - t0


@contextlib.contextmanager
def running(
    url: str,
    *,
    interval_s: float = 0.25,
    max_concurrent: int = 1,
    request_timeout_s: float = 3.0,
    store_hang_s: float = 2.0,
    actuation: Callable[[Service], Any] | None = None,
    fleet: Any = None,
    static: Sequence[TargetInfo] = (),
    header_timeout_s: float = 10.0,
    max_connections: int = 1000,
    http: HttpImpl = "auto",
    recreate_after_s: float = 60.0,
) -> Iterator[Running]:
    """Build, start and serve; ``actuation(service)`` returns the Actuation to use (None: no actuation, so that
    approved drains stay approved and the rails can be counted); ``http`` picks uvicorn's protocol as `kvpilot run`
    serves it (``auto``: httptools where installed, else h11); ``recreate_after_s``: the store setting."""
    settings = load_settings(
        store={"database_url": url, "probe_every_s": 0.25, "recreate_after_s": recreate_after_s},
        collector={"interval_s": interval_s, "timeout_s": interval_s / 2, "discovery": {"kind": "static"}},
        drains={"dry_run": False, "max_concurrent": max_concurrent},
        api={
            "read_tokens": READ, "admin_tokens": ADMIN, "header_timeout_s": header_timeout_s,
            "max_connections": max_connections,
        },
    )  # fmt: skip
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        try:
            t0 = time.monotonic()
            targets = StaticTargets(static)
            service, restored = await asyncio.to_thread(
                build_service, settings, Sources(targets, targets), clock=WallClock(), collector=fleet or WallFleet()
            )
            service.store_hang_s = store_hang_s
            service.actuation = actuation(service) if actuation is not None else None
            app = create_app(
                service, TokenAuth([READ], [ADMIN], anonymous_read=False), request_timeout_s=request_timeout_s
            )
            port = free_port()
            server = uvicorn.Server(
                ApiServerConfig(
                    app, host="127.0.0.1", port=port, header_timeout_s=settings.api.header_timeout_s,
                    max_connections=settings.api.max_connections, http=http, registry=service.registry,
                )
            )  # fmt: skip
            await service.start(restored)
            serving = asyncio.create_task(server.serve())
            await until(lambda: server.started, what="uvicorn started", timeout_s=60.0)  # it offers no event for it
            box.update(service=service, port=port, loop=asyncio.get_running_loop(), startup_s=time.monotonic() - t0)
            ready.set()
            await service.wait()
            server.should_exit = True
            await serving
            service.engine.dispose()
        except BaseException as e:
            box["error"] = e
            ready.set()
            raise

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="kvpilot-under-test", daemon=True)
    thread.start()
    if not ready.wait(60):
        raise AssertionError("the service did not start within 60 s")
    if "error" in box:
        raise box["error"]
    run = Running(box["service"], f"http://127.0.0.1:{box['port']}", box["loop"], thread, box["startup_s"])
    try:
        yield run
    finally:
        if thread.is_alive():
            run.stop()


def postgres_pids(data_dir: Path) -> list[int]:
    """The postmaster of the cluster in ``data_dir`` and every process it forked (its backends)."""
    master = int((data_dir / "postmaster.pid").read_text().split()[0])
    pids = [master]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == master:
                    pids.append(int(entry))
    return pids


@contextlib.contextmanager
def frozen_postgres(data_dir: Path) -> Iterator[None]:
    """SIGSTOP the whole cluster (a database host that stops answering: no error, no reset), then SIGCONT."""
    pids = postgres_pids(data_dir)
    for pid in reversed(pids):
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        # As root the postmaster runs under runuser, which stops itself when its child stops (job control, as su
        # does): it is continued too, or it would never reap the server at shutdown.
        parent = int(Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        for pid in [*pids, parent]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
