"""`kvpilot demo`: a simulated fleet replaying a real trace, watched and scaled by the real kvpilot service.

What runs is what production runs: the simulator serves real-format vLLM and dcgm-exporter pages on loopback,
kvpilot's collector scrapes them over HTTP, the detectors, planner, store (SQLite in a temporary directory) and
API run unchanged, and decisions are applied through the simulator's control API (standing in for the
`deployments/scale` subresource). Only time is compressed: both the simulator and kvpilot's clock run `speed`×
faster than the wall clock, so an hour of trace plays in a few minutes with the same cold starts and windows.
Faults are injected on a schedule through the simulator's control API, as an operator's chaos test would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from api.runtime import Snapshot
from kvpilot.view import Event

DEFAULT_TRACE = Path(__file__).resolve().parent / "data" / "azure2023_conv.csv"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    at_s: float  # simulated seconds after the start
    fault: dict[str, Any]  # the simulator's control API body
    why: str  # what the viewer should watch for


# Spread over the first simulated hour so that each one is seen, and each is followed by quiet time.
DEFAULT_FAULTS: tuple[ScheduledFault, ...] = (
    ScheduledFault(
        420,
        {"type": "kv_pressure", "count": 40, "prompt_tokens": 30000, "output_tokens": 300, "duration_s": 20},
        "a burst of 30k-token prompts: watch KV usage and the kv_exhaustion finding",
    ),
    ScheduledFault(
        1200,
        {"type": "xid", "node": "node-0", "gpu": 1, "xid": 79},
        "XID 79 (GPU fell off the bus) on node-0/1: stuck_gpu, drain held by the safety rails",
    ),
    ScheduledFault(
        1800,
        {"type": "routing", "routing": "round_robin"},
        "gateway switches to round-robin: shared prefixes spread, prefix hit ratio falls",
    ),
    ScheduledFault(
        2400,
        {"type": "hung_gpu", "node": "node-0", "gpu": 0},
        "node-0/0 pinned busy with no token progress: a hang",
    ),
)


@dataclass(frozen=True)
class DemoConfig:
    trace: Path = DEFAULT_TRACE
    replicas: int = 2  # at the start; kvpilot's decisions change it
    speed: float = 15.0  # simulated seconds per wall second
    duration_s: float | None = 240.0  # wall seconds; None runs until interrupted
    cold_start_s: float = 120.0  # simulated
    interval_s: float = 5.0  # simulated seconds per control-loop tick
    rate_scale: float = 2.0  # the conversation trace is light for one 8B replica: double it so scaling shows
    engine: str = "vllm"
    seed: int = 0
    faults: tuple[ScheduledFault, ...] = DEFAULT_FAULTS
    http_port: int = 0  # 0: a free port

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration must be > 0 seconds, got {self.duration_s}")


class ScaledClock:
    """kvpilot's clock in the demo: simulated seconds, moving `speed`× faster than the wall clock."""

    def __init__(self, speed: float, start: float | None = None) -> None:
        self.speed = speed
        self._t0 = time.time() if start is None else start
        self._m0 = time.monotonic()

    def now(self) -> float:
        return self._t0 + (time.monotonic() - self._m0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)


@dataclass
class DemoSummary:
    simulated_s: float = 0.0
    requests_arrived: int = 0
    ttft_s: dict[str, float] = field(default_factory=dict)
    finding_kinds: dict[str, int] = field(default_factory=dict)  # kind -> distinct findings opened
    scale_changes: list[tuple[float, int, int]] = field(default_factory=list)  # (t, from, to) of desired replicas
    faults_injected: int = 0
    peak_ready_replicas: int = 0
    database: str = ""


class _Tracker:
    """What the summary needs from the stream of snapshots."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.findings: dict[str, str] = {}  # finding id -> kind
        self.desired: dict[str, int] = {}
        self.summary = DemoSummary()

    def observe(self, snap: Snapshot) -> None:
        for f in snap.findings:
            self.findings.setdefault(f.id, f.kind)
        for key, d in snap.decisions.items():
            before = self.desired.get(key)
            if before is not None and before != d.desired_replicas:
                self.summary.scale_changes.append((snap.t - self.start, before, d.desired_replicas))
            self.desired[key] = d.desired_replicas
        ready = sum(dep.ready_replicas for dep in snap.deployments.values())
        self.summary.peak_ready_replicas = max(self.summary.peak_ready_replicas, ready)


@contextlib.contextmanager
def _simulator(cfg: DemoConfig) -> Iterator[tuple[str, Any]]:
    from simulator import PROFILES, Fleet, FleetConfig, load_trace
    from simulator.server import LiveFleet, make_server

    trace = load_trace(cfg.trace, rate_scale=cfg.rate_scale, seed=cfg.seed)
    fleet = Fleet(
        FleetConfig(
            profile=PROFILES["llama3-8b-h100"],
            replicas=cfg.replicas,
            cold_start_s=cfg.cold_start_s,
            routing="prefix_affinity",
            seed=cfg.seed,
            loop=True,  # replay the trace again once it ends, so that --forever keeps traffic flowing
        ),
        trace,
    )
    live = LiveFleet(fleet, engine=cfg.engine, speed=cfg.speed)
    server = make_server(live, "127.0.0.1", 0)
    live.start()
    thread = threading.Thread(target=server.serve_forever, name="simulator-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", live
    finally:
        server.shutdown()
        live.stop()


async def run_demo(
    cfg: DemoConfig,
    *,
    on_update: Callable[[Snapshot | None, list[Event], str], None],
    stop: asyncio.Event | None = None,
) -> DemoSummary:
    """Run the demo until `cfg.duration_s` (wall) passes or `stop` is set; `on_update` redraws the view."""
    from api.auth import TokenAuth
    from api.main import create_app
    from kvpilot.settings import load_settings
    from kvpilot.sources import SimulatorTargets, Sources
    from kvpilot.targets import StaticTargets
    from kvpilot.wiring import build_service

    stop = stop or asyncio.Event()
    events: list[Event] = []
    with tempfile.TemporaryDirectory(prefix="kvpilot-demo-") as data_dir, _simulator(cfg) as (sim_url, live):
        settings = load_settings(
            None,
            environment="development",
            data_dir=Path(data_dir),
            collector={"interval_s": cfg.interval_s, "timeout_s": min(2.0, cfg.interval_s / 2)},
            scaler={"mode": "direct", "cold_start_s": cfg.cold_start_s},
            api={"host": "127.0.0.1", "http_port": cfg.http_port},
        )
        clock = ScaledClock(cfg.speed)
        targets = SimulatorTargets(sim_url)
        sources = Sources(discovery=targets, static=StaticTargets([]), simulator_url=sim_url)
        service, restored = await asyncio.to_thread(build_service, settings, sources, clock=clock, sleep=clock.sleep)
        database = settings.database_url
        api_url, api_task, api_server = await _serve_api(
            create_app(service, TokenAuth([], [], anonymous_read=True)), cfg.http_port
        )
        header = (
            f"kvpilot demo — {cfg.trace.name} ×{cfg.rate_scale:g} at {cfg.speed:g}× speed · simulator {sim_url} · "
            f"API {api_url}/docs · Ctrl-C to stop"
        )
        await service.start(restored)
        start_sim, start_wall = clock.now(), time.monotonic()
        tracker = _Tracker(start_sim)
        pending = sorted(cfg.faults, key=lambda f: f.at_s)
        async with httpx.AsyncClient(base_url=sim_url, timeout=5.0, trust_env=False) as client:
            try:
                while not stop.is_set():
                    elapsed_sim = clock.now() - start_sim
                    while pending and pending[0].at_s <= elapsed_sim:
                        fault = pending.pop(0)
                        r = await client.post("/control/faults", json=fault.fault)
                        outcome = fault.why if r.status_code == 200 else f"refused ({r.status_code}): {r.text[:80]}"
                        events.append(Event(elapsed_sim, f"{fault.fault['type']}: {outcome}"))
                        tracker.summary.faults_injected += r.status_code == 200
                    snap = service.snapshot()
                    if snap is not None:
                        tracker.observe(snap)
                    on_update(snap, events, f"{header} · t={elapsed_sim:,.0f}s simulated")
                    if cfg.duration_s is not None and time.monotonic() - start_wall >= cfg.duration_s:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=0.5)
            finally:
                service.stop.set()
                await service.wait()
                api_server.should_exit = True
                await asyncio.gather(api_task, return_exceptions=True)
                await targets.aclose()
                service.engine.dispose()
        s = tracker.summary
        s.database = database
        s.simulated_s = clock.now() - start_sim
        with live.lock:
            state = live.fleet.snapshot()
            s.requests_arrived = int(state.arrivals_total)
            s.ttft_s = {f"p{round(q * 100)}": v for q, v in live.fleet.ttft_quantiles((0.5, 0.9, 0.99)).items()}
        s.finding_kinds = {}
        for kind in tracker.findings.values():
            s.finding_kinds[kind] = s.finding_kinds.get(kind, 0) + 1
        return s


async def _serve_api(app: Any, port: int) -> tuple[str, asyncio.Task[None], Any]:
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # the demo handles Ctrl-C itself
            yield

    server = _Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    )
    task = asyncio.create_task(server.serve(), name="demo-api")
    while not server.started:
        if task.done():
            await task  # re-raise why it could not start (port in use, …)
            raise RuntimeError("the demo API server stopped before it started")
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{bound}", task, server
