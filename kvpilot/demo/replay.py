"""`kvpilot demo`: a simulated fleet replaying a real trace, watched and scaled by the real kvpilot service.

What runs is what production runs: the simulator serves real-format vLLM and dcgm-exporter pages on loopback,
kvpilot's collector scrapes them over HTTP, the detectors, planner, store (SQLite in a temporary directory) and
API run unchanged. kvpilot publishes its decisions as it does for KEDA, and the demo applies each tick's answer
through the simulator's control API (standing in for the `deployments/scale` subresource that KEDA's HPA writes).
Faults are injected on a schedule through the same control API, as an operator's chaos test would.

Time runs in lockstep, so a seed gives one result: kvpilot's control loop runs on a `VirtualClock`, and its wait
between ticks (the service's injected `sleep`) hands control to the demo, which moves the simulator and the clock
forward by one interval, injects the faults due, and lets the next tick run. Everything that changes the
simulator happens between ticks, in the demo's own order (evictions, scaling, time, faults), never in a task that
races the clock; scrapes are not staggered over the interval (a wall-clock spread means nothing here). `speed`
only paces the ticks against the wall clock for a viewer; `speed=0` runs as fast as the machine goes.

Stuck replicas are handled as a cluster would handle them: when kvpilot's stuck_gpu finding names a replica that
a drain would evict (action `drain_node` or `restart_workload`), the demo deletes that pod through the simulator's
`/control/evict` — the eviction step of the drain, which `NoClusterDrainer` cannot do without a Kubernetes API. The
pod leaves the Service endpoints at once (the gateway stops routing to it), the requests it held are retried
through the gateway, and its ReplicaSet starts a replacement on a healthy GPU. Before it, the demo tells the rollout
stage, as the drain actuator does before each eviction (`RolloutStage.note_removed`), so that the pod's departure is
not read as a rolling update's drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from kvpilot.demo.rollout import RolloutReport, SurgeOff, measure, rollout_body, surge_now
from kvpilot.demo.view import Event, serving_replicas
from kvpilot.runtime.snapshot import Snapshot
from scaler.backtest.gateway import COUNTER, DEFAULT_SCRAPE_INTERVAL_S, ScrapedCounter
from scaler.backtest.result import RolloutWindow
from scaler.backtest.run import measure_window
from scaler.backtest.sim import rolled

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from kvpilot.settings.api import ApiSettings

ARRIVALS = ("engines", "gateway")  # DemoConfig.arrivals
# Every call the demo makes to its own simulator (scrapes, targets, scale), in wall seconds. The simulator is paused
# while they run (lockstep), so no answer is late in simulated time; only a busy machine makes one slow. The scrapes
# timed out at collector.timeout_s (0.9 × interval, 4.5 s) on two cores at load 17–25 (session 31), and a missed
# scrape changed the readings and the first scale-up (seed 233: 205 s with 1 waiting against 535 s with 26).
_LOOPBACK_TIMEOUT_S = 60.0
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "data" / "azure2023_conv.csv"
# Simulated t=0 on kvpilot's clock (2026-01-01T00:00:00Z): fixed, so that nothing depends on when the demo runs.
SIM_EPOCH = 1_767_225_600.0
# Decision reasons by group in the summary: everything that is neither predictive nor reactive held the count
# (stabilised, within_tolerance, step_limited, clamped_min/max, no_metrics, no_arrival_rate, missing_metrics, …).
DECISION_GROUPS = {"predictive": "predictive", "reactive": "reactive"}
# Finding actions that end with the pod deleted: a drain evicts it, a workload restart recreates it.
_EVICTING_ACTIONS = frozenset({"drain_node", "restart_workload"})

log = logging.getLogger(__name__)


class DemoError(RuntimeError):
    """The demo cannot start (a port in use, a trace it cannot read): one line for the operator."""


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    at_s: float  # simulated seconds after the start
    fault: dict[str, Any]  # the simulator's control API body
    why: str  # what the viewer should watch for
    # kv_pressure only: size the burst to the fleet it hits, as a chaos test aimed at the KV cache would: enough
    # prompts to hold this many times the KV pools of the replicas serving then (the body's "count" otherwise).
    fill_kv: float | None = None


# The finding each fault should raise (the summary's "fault_findings" checks it).
FAULT_FINDINGS = {
    "xid": "stuck_gpu",
    "hung_gpu": "stuck_gpu",
    "vanish_gpu": "stuck_gpu",
    "kv_pressure": "kv_exhaustion",
    "routing": "prefix_cache_miss",
    "rollout": "rollout",
}


# Spread over the simulated hour, each followed by ten quiet minutes. The first quarter hour has none, so that the
# first thing the viewer sees is kvpilot pre-warming for the trace's own demand; the burst of long prompts comes
# after the trace's peak, where the fleet has shrunk again.
DEFAULT_FAULTS: tuple[ScheduledFault, ...] = (
    ScheduledFault(
        900,
        {"type": "xid", "node": "node-0", "gpu": 1, "xid": 79},
        "XID 79 (GPU fell off the bus) on node-0/1: stuck_gpu, its pod evicted and replaced",
    ),
    ScheduledFault(
        1500,
        {"type": "routing", "routing": "round_robin"},
        "gateway switches to round-robin: shared prefixes spread, prefix hit ratio falls",
    ),
    ScheduledFault(
        2100,
        {"type": "kv_pressure", "prompt_tokens": 30000, "output_tokens": 300, "duration_s": 20},
        "a burst of 30k-token prompts: watch KV usage and the kv_exhaustion finding",
        fill_kv=1.5,
    ),
    ScheduledFault(
        2700,
        {"type": "hung_gpu", "node": "node-0", "gpu": 0},
        "node-0/0 pinned busy with no token progress: a hang, its pod evicted and replaced",
    ),
)


@dataclass(frozen=True)
class DemoConfig:
    trace: Path = DEFAULT_TRACE
    replicas: int = 2  # at the start; kvpilot's decisions change it
    speed: float = 15.0  # simulated seconds per wall second, for a viewer; 0: as fast as possible
    duration_s: float | None = 3600.0  # simulated seconds of trace (at most the trace); None: loop until stopped
    drain_s: float = 300.0  # after the trace: simulated seconds left for requests still in flight to finish
    cold_start_s: float = 120.0  # simulated
    interval_s: float = 5.0  # simulated seconds per control-loop tick
    # The load sized to the replica, so that the trace's own rises cross replica boundaries. The planner reads
    # 44-52 req/s per 8B H100 replica on this trace's prompts; at ×4 (15-31 req/s) two replicas carry the whole
    # hour, every scale-up was a forecast wobble at the 1-2 boundary (2 → 1 → 2 in the first 7 minutes) or a fault's
    # lost capacity, and a 4 % change in capacity moved the first one after the XID 79 (reactive). At ×8 (30-62
    # req/s) the fleet goes 2 → 3 on the trace's opening rise, 4 and 5 towards its peak, predictively, with the
    # planner as of 4c7dc2e; after 55d513b (capacity lifted to the profile) two replicas carry the opening rise with
    # no spare and the XID 79 queues ~1,900 requests (BENCHMARKS.md "Demo").
    rate_scale: float = 8.0
    engine: str = "vllm"
    seed: int = 0
    faults: tuple[ScheduledFault, ...] = DEFAULT_FAULTS
    http_port: int = 0  # 0: a free port
    slo_ttft_s: float = 2.0  # the TTFT SLO the summary counts attainment against (as `kvpilot backtest`)
    profile: str = "llama3-8b-h100"  # simulator.PROFILES key
    # A rolling update (the simulator's `rollout` fault, maxSurge 0) injected at this simulated second (None: none),
    # in waves of `rollout_wave`, the new version `rollout_speed` times as fast; `surge` False withdraws the rollout
    # stage's surge (kvpilot.demo.rollout.SurgeOff), so that a run without it compares.
    rollout_at_s: float | None = None
    rollout_wave: int = 1
    rollout_speed: float = 1.0
    surge: bool = True
    # Arrival windows [start, end) whose TTFT the summary also reports ("windows"): the reference for a rollout's
    # window, measured in a run without one (bench/demo_rollout.py).
    windows: tuple[tuple[float, float], ...] = ()
    # What kvpilot's planner reads as arrivals (`ARRIVALS`): "engines", the engines' estimate in FleetState, as
    # `kvpilot run` on Kubernetes by default (no `collector.arrivals`) and `kvpilot backtest` by default; "gateway",
    # the simulated router's request counter as Prometheus scrapes it every `gateway_scrape_s`, read by the loop's
    # arrivals stage as `kvpilot run` reads `collector.arrivals` (`_gateway_arrivals`).
    arrivals: str = "engines"
    gateway_scrape_s: float = DEFAULT_SCRAPE_INTERVAL_S

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {self.arrivals!r}")
        if not (math.isfinite(self.gateway_scrape_s) and self.gateway_scrape_s > 0):
            raise ValueError(f"the gateway's scrape interval must be > 0 s, got {self.gateway_scrape_s}")
        if not (math.isfinite(self.speed) and self.speed >= 0):
            raise ValueError(f"speed must be >= 0 (0: as fast as possible), got {self.speed}")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError(f"duration must be > 0 simulated seconds, got {self.duration_s}")
        if not self.interval_s > 0 or self.drain_s < 0:
            raise ValueError("interval must be > 0 and drain >= 0 simulated seconds")
        if not self.slo_ttft_s > 0:
            raise ValueError(f"slo_ttft_s must be > 0, got {self.slo_ttft_s}")
        if self.rollout_wave < 1 or not (math.isfinite(self.rollout_speed) and self.rollout_speed > 0):
            raise ValueError("the rollout's wave must be >= 1 replica and its speed > 0")
        if self.rollout_at_s is not None:
            if self.duration_s is None:
                raise ValueError("a rollout needs a replay of known length: drop --forever or --rollout-at")
            if not (math.isfinite(self.rollout_at_s) and 0 <= self.rollout_at_s < self.duration_s):
                raise ValueError(
                    f"the rollout at {self.rollout_at_s:g} s is not within the replay (0 to {self.duration_s:g} s, "
                    "--duration)"
                )

    def scheduled_faults(self) -> list[ScheduledFault]:
        """The faults in the order they are due: the schedule's, and the rollout where one is asked for."""
        faults = list(self.faults)
        if self.rollout_at_s is not None:
            surge = "kvpilot surges for each wave" if self.surge else "kvpilot's surge is off (--no-surge)"
            faults.append(
                ScheduledFault(
                    self.rollout_at_s,
                    rollout_body(wave_size=self.rollout_wave, speed=self.rollout_speed),
                    f"a rolling update, maxSurge 0, waves of {self.rollout_wave}: {surge}; watch the rollout finding",
                )
            )
        return sorted(faults, key=lambda f: f.at_s)


@dataclass
class DemoSeries:
    """What `--plot` draws, one point per tick, recorded from the run itself (simulated seconds since the start)."""

    t: list[float] = field(default_factory=list)
    demand_rps: list[float] = field(default_factory=list)  # requests that arrived at the gateway in the tick, per s
    seen_rps: list[float] = field(default_factory=list)  # the arrival rate kvpilot measured (nan: unknown)
    forecast_t: list[float] = field(default_factory=list)  # when each forecast is for: tick + horizon
    forecast_rps: list[float] = field(default_factory=list)
    desired: list[int] = field(default_factory=list)  # kvpilot's decision this tick (summed over deployments)
    ready: list[int] = field(default_factory=list)  # replicas serving
    waiting: list[float] = field(default_factory=list)  # requests queued on the replicas (nan: unknown)
    faults: list[tuple[float, str]] = field(default_factory=list)  # (t, fault type) of each fault injected
    findings: list[tuple[float, str]] = field(default_factory=list)  # (t, kind) of each finding opened


@dataclass
class DemoSummary:
    seed: int = 0
    simulated_s: float = 0.0
    requests: int = 0  # arrived at the gateway (trace and injected)
    served: int = 0  # got their first token
    never_served: int = 0  # never got one by the end (counted as SLO misses, with their wait as TTFT)
    slo_ttft_s: float = 2.0
    slo_attainment: float = 1.0  # share of all requests with a first token within the SLO
    ttft_s: dict[str, float | None] = field(default_factory=dict)  # p50/p90/p99, never-served included
    decisions: dict[str, int] = field(default_factory=lambda: {"predictive": 0, "reactive": 0, "hold": 0})
    first_scale_up: dict[str, Any] | None = None  # {"t", "reason", "waiting"} of the first desired > current
    finding_kinds: dict[str, int] = field(default_factory=dict)  # kind -> distinct findings opened
    scale_changes: list[tuple[float, int, int]] = field(default_factory=list)  # (t, from, to) of desired replicas
    faults_injected: int = 0
    fault_findings: list[dict[str, Any]] = field(default_factory=list)  # per fault: the finding it raised, if any
    evictions: list[dict[str, Any]] = field(default_factory=list)  # {"t", "replica", "requests_retried"}
    peak_serving_replicas: int = 0
    replica_hours: float = 0.0  # pods held (loading or serving), integrated over simulated time
    database: str = ""
    arrivals: str = "engines"  # what the planner read as arrivals (DemoConfig.arrivals)
    gateway: dict[str, Any] | None = None  # with "gateway": how the loop read the router's counter
    rollout: RolloutReport | None = None  # --rollout-at only
    windows: list[RolloutWindow] = field(default_factory=list)  # DemoConfig.windows, measured
    series: DemoSeries = field(default_factory=DemoSeries)  # for --plot; not in the JSON

    def to_json(self) -> dict[str, Any]:
        """The one object `kvpilot demo --json` prints: the keys issue 10 asks for, then extras."""
        return (
            {
                "requests": self.requests,
                "served": self.served,
                "never_served": self.never_served,
                "slo_attainment": round(self.slo_attainment, 6),
                "decisions": dict(self.decisions),
                "first_scale_up": self.first_scale_up,
                "findings": dict(sorted(self.finding_kinds.items())),
                "fault_findings": list(self.fault_findings),
                "seed": self.seed,
                "simulated_s": round(self.simulated_s, 3),
                "slo_ttft_s": self.slo_ttft_s,
                "ttft_p50_s": self.ttft_s.get("p50"),
                "ttft_p99_s": self.ttft_s.get("p99"),
                "replica_hours": round(self.replica_hours, 4),
                "peak_serving_replicas": self.peak_serving_replicas,
                "faults_injected": self.faults_injected,
                "evictions": list(self.evictions),
                "arrivals": self.arrivals,
            }
            | ({} if self.gateway is None else {"gateway": dict(self.gateway)})
            | ({} if self.rollout is None else {"rollout": self.rollout.to_json()})
            | ({"windows": [w.to_json() for w in self.windows]} if self.windows else {})
        )


def decision_group(reason: str) -> str:
    """predictive | reactive | hold (every other reason kept or capped the count)."""
    return DECISION_GROUPS.get(reason, "hold")


class _Tracker:
    """What the summary and the event log need from each tick's snapshot (exactly one per tick)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.open: dict[str, str] = {}  # finding id -> kind, open now
        self.opened: dict[str, str] = {}  # every finding id ever opened -> kind
        self.desired: dict[str, int] = {}
        self.summary = DemoSummary()

    def observe(self, snap: Snapshot, t: float) -> None:
        s = self.summary
        now_open = {f.id: f for f in snap.findings}
        for fid, f in now_open.items():
            if fid not in self.open:
                self.events.append(Event(t, f"finding opened: {f.severity.value} {f.kind}: {f.summary} → {f.action}"))
                s.series.findings.append((t, f.kind))
            self.opened.setdefault(fid, f.kind)
        for fid, kind in self.open.items():
            if fid not in now_open:
                self.events.append(Event(t, f"finding closed: {kind} ({fid})"))
        self.open = {fid: f.kind for fid, f in now_open.items()}
        for key, d in sorted(snap.decisions.items()):
            if d.timestamp != snap.t:
                continue  # a stored decision shown until re-decided: not this tick's
            s.decisions[decision_group(d.reason)] += 1
            dep = snap.deployments.get(key)
            if s.first_scale_up is None and d.desired_replicas > d.current_replicas:
                waiting = dep.requests_waiting if dep is not None else None
                s.first_scale_up = {"t": round(t, 3), "reason": d.reason, "waiting": waiting}
            before = self.desired.get(key)
            if before is not None and before != d.desired_replicas:
                s.scale_changes.append((t, before, d.desired_replicas))
                self.events.append(
                    Event(t, f"{key}: desired {before} → {d.desired_replicas} ({d.reason}): {d.message}")
                )
            self.desired[key] = d.desired_replicas
        s.peak_serving_replicas = max(s.peak_serving_replicas, serving_replicas(snap))
        self._record(snap, t)

    def _record(self, snap: Snapshot, t: float) -> None:
        series = self.summary.series
        series.t.append(t)
        series.ready.append(serving_replicas(snap))
        series.desired.append(sum(self.desired.values()))
        waiting = [d.requests_waiting for d in snap.deployments.values()]
        series.waiting.append(math.nan if not waiting or None in waiting else float(sum(w or 0.0 for w in waiting)))
        seen = [d.arrival_rate for d in snap.deployments.values()]
        series.seen_rps.append(math.nan if not seen or None in seen else float(sum(r or 0.0 for r in seen)))
        now = [d for d in snap.decisions.values() if d.timestamp == snap.t]
        points = [d.forecast.get("arrival_rate") for d in now]
        if now and all(p is not None and math.isfinite(p) for p in points):
            series.forecast_t.append(t + max(d.forecast.get("horizon_s", 0.0) for d in now))
            series.forecast_rps.append(float(sum(max(0.0, p or 0.0) for p in points)))


class _Lockstep:
    """The service's `sleep` in the demo. The control loop calls it after each tick (detect, decide, actuate done);
    it parks there until the demo has moved simulated time forward and calls `resume`."""

    def __init__(self) -> None:
        self._parked: asyncio.Queue[float] = asyncio.Queue()
        self._resume = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self._resume.clear()
        self._parked.put_nowait(seconds)
        await self._resume.wait()

    async def tick_done(self, stop: asyncio.Event) -> bool:
        """Wait until the loop parks after a tick; False if `stop` is set first."""
        parked = asyncio.ensure_future(self._parked.get())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({parked, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not parked.done():
                parked.cancel()
        return parked.done() and not parked.cancelled()

    def resume(self) -> None:
        self._resume.set()


def _scaling_settings(profile: Any) -> dict[str, Any]:
    """What a real operator configures for this deployment from a benchmark of one replica."""
    from scaler.backtest.sim import serving_profile_fields

    return {"profile": serving_profile_fields(profile)}


@contextlib.contextmanager
def _simulator(cfg: DemoConfig) -> Iterator[tuple[str, Any]]:
    from simulator import PROFILES, Fleet, FleetConfig, load_trace
    from simulator.server import LiveFleet, make_server

    duration = cfg.duration_s
    try:
        trace = load_trace(cfg.trace, rate_scale=cfg.rate_scale, seed=cfg.seed, duration_s=duration)
    except (OSError, ValueError) as e:  # a folder that is no ServeGen trace, an unreadable or malformed file
        raise DemoError(f"unreadable trace: {e}") from None
    config = FleetConfig(
        profile=PROFILES[cfg.profile],
        replicas=cfg.replicas,
        cold_start_s=cfg.cold_start_s,
        routing="prefix_affinity",
        seed=cfg.seed,
        loop=duration is None,  # --forever replays the trace again and again
    )
    try:
        fleet = Fleet(config, trace)
    except ValueError as e:  # more requests than the request level holds: was a traceback, exit 1
        raise DemoError(f"{e}; for the demo, a smaller --rate-scale (now {cfg.rate_scale:g}) or --duration") from None
    live = LiveFleet(fleet, engine=cfg.engine)  # not started: the demo advances it in lockstep
    server = make_server(live, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, name="simulator-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", live
    finally:
        server.shutdown()
        server.server_close()


def _check_port(port: int) -> None:
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
            raise DemoError(f"port {port} {why}: pass another --port, or --port 0 for any free one") from None


def trace_load(trace: Any) -> str:
    """The trace as replayed (rate scale applied): requests, span and mean rate, said in the header so that a trace of
    one's own can be sized against the two starting replicas with `--rate-scale`, and a span in the wrong unit (a
    `Timestamp` in milliseconds: ten minutes as a week) shows before the replay."""
    span = float(trace.duration_s)
    requests = round(trace.expected_requests())
    rate = requests / span if span > 0 else 0.0
    return f"{requests:,} request{'' if requests == 1 else 's'} over {span:,.0f} s ({rate:.3g} req/s on average)"


async def run_demo(
    cfg: DemoConfig,
    *,
    on_update: Callable[[Snapshot | None, list[Event], str], None],
    stop: asyncio.Event | None = None,
) -> DemoSummary:
    """Run the demo until the trace (cut to `cfg.duration_s`) is replayed and its requests are served, or `stop` is
    set; `on_update` is called after every tick (and once before the first)."""
    from api.auth import TokenAuth
    from api.main import create_app
    from collector.clock import VirtualClock
    from collector.scrape import Collector, ScrapeConfig
    from kvpilot.runtime.runner import keda_reader
    from kvpilot.runtime.scale_view import SimulatorScale
    from kvpilot.runtime.sources import SimulatorTargets, Sources
    from kvpilot.runtime.targets import StaticTargets
    from kvpilot.runtime.wiring import build_service
    from kvpilot.settings import load_settings
    from scaler.publish import DecisionBoard
    from simulator import PROFILES

    if not cfg.trace.exists():
        raise DemoError(f"trace not found: {cfg.trace}")
    _check_port(cfg.http_port)
    stop = stop or asyncio.Event()
    events: list[Event] = []
    with tempfile.TemporaryDirectory(prefix="kvpilot-demo-") as data_dir, _simulator(cfg) as (sim_url, live):
        trace_s = live.fleet.trace.duration_s
        if cfg.rollout_at_s is not None and cfg.rollout_at_s >= trace_s:
            raise DemoError(f"the rollout at {cfg.rollout_at_s:g} s is not within the trace ({trace_s:g} s long)")
        settings = load_settings(
            None,
            environment="development",
            data_dir=Path(data_dir),
            # Its own SQLite file, whatever KVPILOT_DATABASE_URL says: a variable left exported for `kvpilot db` put
            # the simulated fleet's decisions and findings (a vanished GPU on node-0, which the store's next reader
            # restores and asks to drain) into that database, while the summary called it temporary.
            store={"database_url": f"sqlite:///{Path(data_dir) / 'kvpilot.db'}"},
            # The settings' bound (under interval_s); the demo's own Collector below scrapes with _LOOPBACK_TIMEOUT_S.
            collector={"interval_s": cfg.interval_s, "timeout_s": 0.9 * cfg.interval_s},
            scaler={
                "mode": "advisory",  # the demo applies the published answer, in lockstep (see the module docstring)
                "cold_start_s": cfg.cold_start_s,
                "default": _scaling_settings(PROFILES[cfg.profile]),
            },
            api={"host": "127.0.0.1", "http_port": cfg.http_port},
        )
        clock = VirtualClock(SIM_EPOCH)
        lockstep = _Lockstep()
        # Loopback calls to a paused simulator: generous timeouts, so that a busy machine cannot change the result.
        targets = SimulatorTargets(sim_url, timeout_s=_LOOPBACK_TIMEOUT_S)
        # the replica count alone: a gateway's counter reaches the loop through its arrivals stage, as under
        # `kvpilot run` with collector.arrivals
        scale = SimulatorScale(sim_url, timeout_s=_LOOPBACK_TIMEOUT_S)
        arrivals = _gateway_arrivals(live, cfg, settings) if cfg.arrivals == "gateway" else None
        sources = Sources(discovery=targets, static=StaticTargets([]), simulator_url=sim_url)
        c = settings.collector
        collector = Collector(ScrapeConfig(timeout_s=_LOOPBACK_TIMEOUT_S, max_bytes=c.max_body_bytes), clock=clock)
        board = DecisionBoard()
        service, restored = await asyncio.to_thread(
            build_service,
            settings,
            sources,
            clock=clock,
            sleep=lockstep.sleep,
            collector=collector,
            scale=scale,
            board=board,
            rollout=None if cfg.surge else SurgeOff,
            arrivals=arrivals,
        )
        # KEDA's metrics-api route reads the loop's decisions as under `kvpilot run`: the same reader over its board
        reader = keda_reader(board, settings, service.clock)
        try:
            api_url, api_task, api_server = await _serve_api(
                create_app(service, TokenAuth([], [], anonymous_read=True), keda_reader=reader), cfg.http_port,
                settings.api, service.registry,
            )  # fmt: skip
        except BaseException:
            service.engine.dispose()
            await targets.aclose()
            await scale.aclose()
            raise
        end_s = None if cfg.duration_s is None else min(cfg.duration_s, live.fleet.trace.duration_s)
        pace = "as fast as possible" if cfg.speed == 0 else f"{cfg.speed:g}× speed"
        header = (
            f"kvpilot demo — {cfg.trace.name} ×{cfg.rate_scale:g}: {trace_load(live.fleet.trace)}, seed {cfg.seed}, "
            f"{pace} · API {api_url}/docs · simulator {sim_url} · Ctrl-C to stop"
        )
        on_update(None, events, header)
        tracker = _Tracker(events)
        tracker.summary.seed = cfg.seed
        tracker.summary.slo_ttft_s = cfg.slo_ttft_s
        tracker.summary.arrivals = cfg.arrivals
        if cfg.arrivals == "gateway":  # as `kvpilot backtest --json` says it
            tracker.summary.gateway = {
                "series": 1,
                "scrape_interval_s": cfg.gateway_scrape_s,
                "rate_window_s": settings.collector.rate_window_s,
                "reader": "kvpilot.runtime.arrivals.GatewayArrivals (kvpilot run's collector.arrivals)",
            }
        pending = cfg.scheduled_faults()
        ro = None
        if cfg.rollout_at_s is not None:
            ro = RolloutReport(cfg.rollout_at_s, cfg.rollout_wave, cfg.rollout_speed, cfg.surge)
            tracker.summary.rollout = ro
        evicted: set[str] = set()
        applied: dict[str, int] = {}
        last_t: float | None = None
        before = (0, 0.0)  # (arrivals, t) at the last recorded tick
        t = 0.0
        wall0 = time.monotonic()
        await service.start(restored)
        async with httpx.AsyncClient(base_url=sim_url, timeout=_LOOPBACK_TIMEOUT_S, trust_env=False) as client:
            try:
                while await lockstep.tick_done(stop):
                    snap = service.snapshot()
                    # A loop that crashed parks in its restart delay without a new tick: nothing new to count.
                    if snap is not None and snap.t != last_t:
                        last_t = snap.t
                        tracker.observe(snap, t)
                        await _evict_stuck(
                            client, snap, t, evicted, tracker.summary, events, service.loop.rollout.note_removed
                        )
                        await _apply_decisions(client, snap, applied, events, t)
                        if ro is not None:
                            ro.observe_surge(t, surge_now(snap.decisions), cfg.interval_s)
                    with live.lock:
                        state = live.fleet.snapshot(replicas=())
                        pods = sum(1 for g in state.gpus if g.pod)
                        in_flight = len(live.fleet.in_flight())
                    series = tracker.summary.series
                    if len(series.demand_rps) < len(series.t):  # this tick was recorded: arrivals since the last
                        elapsed = t - before[1]
                        series.demand_rps.append((state.arrivals_total - before[0]) / elapsed if elapsed else 0.0)
                        before = (state.arrivals_total, t)
                    tracker.summary.replica_hours += (
                        pods / PROFILES[cfg.profile].gpus_per_replica * cfg.interval_s / 3600
                    )
                    on_update(snap, events, f"{header} · t={t:,.0f}s simulated")
                    if end_s is not None and t >= end_s and (in_flight == 0 or t >= end_s + cfg.drain_s):
                        break
                    if cfg.speed > 0 and await _paced(stop, wall0 + (t + cfg.interval_s) / cfg.speed):
                        break
                    t += cfg.interval_s
                    live.advance_to(t)
                    while pending and pending[0].at_s <= t:
                        fault = pending.pop(0)
                        body = dict(fault.fault)
                        if fault.fill_kv is not None:
                            with live.lock:
                                ready = live.fleet.snapshot().ready_replicas()
                            kv = PROFILES[cfg.profile].kv_capacity_tokens * fault.fill_kv * max(ready, 1)
                            body["count"] = math.ceil(kv / int(body.get("prompt_tokens", 30000)))
                        await _inject(client, replace(fault, fault=body), t, tracker.summary, events)
                        if (
                            ro is not None
                            and ro.window is None
                            and tracker.summary.series.faults[-1:] == [(t, "rollout")]
                        ):
                            ro.window = RolloutWindow(t, t)  # the simulator took it (a refusal is an event)
                    if ro is not None and ro.window is not None and not ro.ended:
                        with live.lock:
                            done = rolled(live.fleet.snapshot().replicas)
                        ro.window.end_s, ro.ended = t, done
                    clock.set(SIM_EPOCH + t)
                    lockstep.resume()
            finally:
                service.stop.set()
                lockstep.resume()
                await service.wait()
                api_server.should_exit = True
                await asyncio.gather(api_task, return_exceptions=True)
                await targets.aclose()
                await scale.aclose()
                service.engine.dispose()
        s = tracker.summary
        s.database = settings.database_url
        s.simulated_s = t
        s.finding_kinds = {}
        for kind in tracker.opened.values():
            s.finding_kinds[kind] = s.finding_kinds.get(kind, 0) + 1
        with live.lock:
            _count_requests(s, live.fleet, now=t, slo_s=cfg.slo_ttft_s)
        s.fault_findings = attribute_findings(s.series.faults, s.series.findings)
        if ro is not None:
            if ro.window is not None and not ro.ended and end_s is not None:
                ro.window.end_s = min(ro.window.end_s, end_s)  # as the backtest's: the replay's end
            with live.lock:
                measure(ro, live.fleet, live.fleet.trace, now=t, slo_s=cfg.slo_ttft_s)
            ro.finding_after_s = next(
                (f["after_s"] for f in s.fault_findings if f["fault"] == "rollout" and f["finding"]), None
            )
        for start, stop_s in cfg.windows:
            s.windows.append(RolloutWindow(start, stop_s))
            with live.lock:
                measure_window(s.windows[-1], live.fleet, live.fleet.trace, now=t, slo_s=cfg.slo_ttft_s)
        return s


def _gateway_arrivals(live: Any, cfg: DemoConfig, settings: Any) -> Any:
    """The loop's arrivals stage for ``--arrivals gateway``: `kvpilot run`'s ``GatewayArrivals`` (its label mapping,
    ``collector.rate_window_s``) asking a simulated Prometheus, which answers the simulated router's request counter
    as last scraped (``scaler.backtest.gateway.ScrapedCounter``, every ``cfg.gateway_scrape_s``)."""
    from collector.promql.decode import Series
    from kvpilot.runtime.arrivals import GatewayArrivals, LabelMapping

    scraped = ScrapedCounter(cfg.gateway_scrape_s)

    async def prometheus(query: str, now: float) -> list[Series]:
        with live.lock:  # the simulator stands still while the loop ticks (the demo's lockstep)
            state = live.fleet.snapshot(replicas=())
            namespace, deployment = live.fleet.config.namespace, live.fleet.config.deployment
        scraped.observe(float(state.time), float(state.arrivals_total))
        if scraped.value is None:
            return []
        labels = {"__name__": COUNTER, "namespace": namespace, "deployment": deployment}
        return [{"metric": labels, "value": [now, repr(scraped.value)]}]

    return GatewayArrivals(prometheus, COUNTER, LabelMapping(), window_s=settings.collector.rate_window_s)


def attribute_findings(
    faults: list[tuple[float, str]], findings: list[tuple[float, str]], *, last_window_s: float = 600.0
) -> list[dict[str, Any]]:
    """Per injected fault: the first finding of the kind it should raise (FAULT_FINDINGS) opened at or after it and
    before the next fault (within `last_window_s` for the last), with how long after; finding None when none did."""
    out: list[dict[str, Any]] = []
    for i, (t, kind) in enumerate(faults):
        until = faults[i + 1][0] if i + 1 < len(faults) else t + last_window_s
        want = FAULT_FINDINGS.get(kind)
        hit = next((ft for ft, fk in findings if fk == want and t <= ft < until), None)
        out.append(
            {
                "t": t,
                "fault": kind,
                "finding": want if hit is not None else None,
                "after_s": None if hit is None else round(hit - t, 3),
            }
        )
    return out


async def _paced(stop: asyncio.Event, wall_deadline: float) -> bool:
    """Wait until the wall clock reaches the deadline; True if `stop` was set meanwhile."""
    delay = wall_deadline - time.monotonic()
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
    return stop.is_set()


async def _inject(
    client: httpx.AsyncClient, fault: ScheduledFault, t: float, s: DemoSummary, events: list[Event]
) -> None:
    r = await client.post("/control/faults", json=fault.fault)
    outcome = fault.why if r.status_code == 200 else f"refused ({r.status_code}): {r.text[:80]}"
    if r.status_code == 200 and fault.fill_kv is not None:
        outcome += f" ({fault.fault['count']} prompts: {fault.fill_kv:g}× the serving replicas' KV pools)"
    events.append(Event(t, f"fault {fault.fault['type']}: {outcome}"))
    s.faults_injected += r.status_code == 200
    if r.status_code == 200:
        s.series.faults.append((t, str(fault.fault["type"])))


async def _apply_decisions(
    client: httpx.AsyncClient, snap: Snapshot, applied: dict[str, int], events: list[Event], t: float
) -> None:
    """What KEDA's HPA does with kvpilot's answer: set the deployment's replica count to it when it changes."""
    from scaler.publish import scale_target

    for key, d in sorted(snap.decisions.items()):
        target = scale_target(d)
        if d.timestamp != snap.t or applied.get(key) == target:
            continue
        r = await client.post("/control/replicas", json={"count": target})
        if r.status_code == 200:
            applied[key] = target
        else:
            events.append(Event(t, f"scaling {key} to {target} refused ({r.status_code}): {r.text[:80]}"))


async def _evict_stuck(
    client: httpx.AsyncClient,
    snap: Snapshot,
    t: float,
    evicted: set[str],
    s: DemoSummary,
    events: list[Event],
    note_removed: Callable[[str, float], None],
) -> None:
    """Apply open stuck_gpu findings as a drain would to the pod they name: evict it (see the module docstring).
    ``note_removed`` is told each pod ("namespace/name") first, as the drain actuator's ``on_evict`` is."""
    for f in snap.findings:
        replica = f.evidence.get("replica")
        if f.kind != "stuck_gpu" or f.action not in _EVICTING_ACTIONS or not isinstance(replica, str):
            continue
        if replica in evicted:
            continue
        evicted.add(replica)
        namespace = next((r.sample.namespace for r in snap.replicas if r.sample.replica == replica), None)
        if namespace is None:
            namespace = str(f.evidence.get("deployment") or "default").split("/", 1)[0]
        note_removed(f"{namespace}/{replica.split('#', 1)[0]}", snap.t)
        r = await client.post("/control/evict", json={"replica": replica})
        if r.status_code != 200:
            events.append(Event(t, f"evict {replica}: refused ({r.status_code}): {r.text[:80]}"))
            continue
        retried = int(r.json()["requests_retried"])
        s.evictions.append({"t": t, "replica": replica, "requests_retried": retried})
        events.append(
            Event(
                t,
                f"evicted {replica} ({f.action} for {f.subject.node}/{f.subject.gpu}): out of the endpoints, "
                f"{retried} stranded requests retried on other replicas, a replacement cold-starts on a healthy GPU",
            )
        )


def _count_requests(s: DemoSummary, fleet: Any, *, now: float, slo_s: float) -> None:
    """Served / never served and TTFT over every request that arrived: one that never got a first token counts
    as an SLO miss with its wait so far as its TTFT (a lower bound), so it can only push the quantiles up."""
    import numpy as np

    state = fleet.snapshot(replicas=())
    s.requests = int(state.arrivals_total)
    ttft = [f.ttft_s for f in fleet.finished()]
    unserved: list[float] = []
    for arrival, first in fleet.in_flight():
        if first is None:
            unserved.append(max(0.0, now - arrival))
        else:
            ttft.append(first)
    s.served = len(ttft)
    s.never_served = s.requests - s.served
    # Requests the engines dropped (a prompt larger than the KV pool) are in neither list: misses, TTFT unknown.
    lost = max(0, s.never_served - len(unserved))
    values = np.sort(np.asarray(ttft + unserved + [math.inf] * lost, dtype=np.float64))
    s.slo_attainment = float(np.count_nonzero(np.asarray(ttft) <= slo_s)) / s.requests if s.requests else 1.0
    s.ttft_s = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        if len(values) == 0:
            s.ttft_s[name] = None
            continue
        v = float(values[min(len(values) - 1, math.ceil(q * len(values)) - 1)])
        s.ttft_s[name] = round(v, 6) if math.isfinite(v) else None


async def _serve_api(
    app: Any, port: int, api: ApiSettings, registry: CollectorRegistry
) -> tuple[str, asyncio.Task[None], Any]:
    from kvpilot.runtime.http_server import ApiServerConfig
    from kvpilot.runtime.runner import UvicornServer

    # bounded as under `kvpilot run`: a head that never ends, or a crowd of connections, cannot pin it either
    server = UvicornServer(
        ApiServerConfig(
            app, host="127.0.0.1", port=port, header_timeout_s=api.header_timeout_s,
            max_connections=api.max_connections, registry=registry,
        )
    )  # fmt: skip
    task = asyncio.create_task(server.serve(), name="demo-api")
    while not server.started:
        if task.done():
            try:
                await task
            except (Exception, SystemExit) as e:  # uvicorn exits on a bind error after logging it
                raise DemoError(f"kvpilot's API could not listen on 127.0.0.1:{port}: {e}") from None
            raise DemoError(f"kvpilot's API could not listen on 127.0.0.1:{port}")
        await asyncio.sleep(0.05)
    bound = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{bound}", task, server
