"""Scale to zero and back through the KEDA protocol, against the live simulator.

Everything is real but KEDA and the HPA, which this test plays as they are documented: a gRPC client on the
committed stubs calls GetMetrics then IsActive every `pollingInterval` (kedacore/keda pkg/scalers/
external_scaler.go, GetMetricsAndActivity); KEDA scales an inactive target to 0 after `cooldownPeriod` and an
active one at 0 to 1; the HPA, at every sync, sets ceil(metricValue / targetSize) replicas (AverageValue,
tolerance 0 as docs/keda.md recommends). The replica count it lands on is written to the simulator's control
API, which stands in for the scale subresource. kvpilot runs its real loop (discovery of the simulator's ready
replicas, scraping, FleetState, the planner `kvpilot run` builds with min_replicas 0, the board) in virtual time,
in lockstep with the simulator.

The workload is on for 5 minutes, quiet for 20, then back; the day before had the same shape (fed to the
forecasters as a restart's stored per-minute history would be), so demand returning is foreseeable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from collector.clock import VirtualClock
from collector.scrape import VirtualTimer
from kvpilot.runtime.scale_view import ScaleView, SimulatorScale
from kvpilot.runtime.sources import SimulatorTargets, Sources
from kvpilot.runtime.targets import StaticTargets
from kvpilot.runtime.wiring import build_service
from kvpilot.settings import Settings, load_settings
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.process import ChildConfig, KedaProcess
from scaler.keda.reader import DecisionReader
from scaler.keda.server import build_endpoint
from scaler.keda.servicer import ServicerSettings
from simulator import PROFILES, Fleet, FleetConfig
from simulator.server import LiveFleet, make_server
from simulator.trace.model import RequestColumns, Trace
from store.repo.rollups import RollupPoint

pytestmark = pytest.mark.e2e

START = 1_700_000_000.0
KEY = "llm/chat"
TICK_S = 5.0
COLD_START_S = 120.0
ON = ((0.0, 300.0), (1500.0, 1800.0))  # seconds since START when requests arrive
RETURN_S = ON[1][0]
RATE = 2.0  # requests/s while on
POLLING_S, HPA_SYNC_S, COOLDOWN_S = 5.0, 15.0, 60.0  # KEDA pollingInterval, HPA sync period, cooldownPeriod


def on_off_trace(on: tuple[tuple[float, float], ...] = ON) -> Trace:
    rng = np.random.default_rng(7)
    arrivals = np.concatenate([np.sort(rng.uniform(a, b, int(RATE * (b - a)))) for a, b in on])
    n = len(arrivals)
    columns = RequestColumns(
        arrival_s=arrivals,
        prompt_tokens=np.full(n, 600, dtype=np.int64),
        output_tokens=np.full(n, 120, dtype=np.int64),
        prefix_blocks=[()] * n,
    )
    return Trace("on-off", on[-1][1] + 600.0, _columns=columns)


def yesterday(on: tuple[tuple[float, float], ...] = ON, days: int = 1) -> list[RollupPoint]:
    """The per-minute arrival rates kvpilot stored over the days before: the same on/off shape each day."""
    points = []
    for minute in range(days * 24 * 60):
        t = START - days * 86_400.0 + 60.0 * minute
        since = (t - START) % 86_400.0
        rate = RATE if any(a <= since < b for a, b in on) else 0.0
        points.append(RollupPoint(KEY, t, 12, {"arrival_rate": rate}))
    return points


@dataclass
class Deletable:
    """The simulator's scale view, until the test deletes the deployment."""

    inner: SimulatorScale
    deleted: bool = False

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        if self.deleted:
            return ScaleView(gone=frozenset(k for k in known if k == KEY))
        return await self.inner.read(known, now)


def set_replicas(control: str, count: int) -> None:
    httpx.post(control, json={"count": count}, timeout=5, trust_env=False).raise_for_status()


@dataclass
class Keda:
    """KEDA's scale loop and the HPA, as far as this deployment's replica count goes."""

    stub: pb_grpc.ExternalScalerStub
    control: str  # the simulator's POST /control/replicas
    replicas: int
    last_active: float = -math.inf
    last_sync: float = -math.inf
    log: list[tuple[float, int, bool, int]] = field(default_factory=list)  # (t, metric, active, replicas found)
    errors: list[tuple[float, str]] = field(default_factory=list)

    async def poll(self, now: float) -> None:
        so = pb.ScaledObjectRef(name="chat", namespace="llm", scalerMetadata={"scalerAddress": "kvpilot:9090"})
        try:
            metrics = await self.stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=so, metricName="kvpilot-replicas")
            )
            active = (await self.stub.IsActive(so)).result
        except grpc.aio.AioRpcError as e:
            self.errors.append((now, f"{e.code().name}: {e.details()}"))
            return
        value = metrics.metricValues[0].metricValueFloat
        self.log.append((now - START, round(value), active, self.replicas))  # the replicas KEDA found
        target = self.replicas
        if active:
            self.last_active = now
            if target == 0:
                target = 1  # KEDA activates: 0 -> minReplicaCount or 1, then the HPA takes over
        elif target > 0 and now - self.last_active >= COOLDOWN_S:
            target = 0  # KEDA deactivates after cooldownPeriod (minReplicaCount 0)
        if target > 0 and now - self.last_sync >= HPA_SYNC_S:
            self.last_sync = now
            target = min(max(math.ceil(value / 1.0 - 1e-9), 1), 4)  # AverageValue 1, maxReplicaCount 4
        if target != self.replicas:
            await asyncio.to_thread(set_replicas, self.control, target)
            self.replicas = target


@pytest.fixture
def simulator(request: pytest.FixtureRequest) -> Iterator[tuple[str, LiveFleet]]:
    on = getattr(request, "param", ON)  # the workload's on windows (indirect parametrisation), ON by default
    config = FleetConfig(
        profile=PROFILES["llama3-8b-h100"],
        replicas=1,
        cold_start_s=COLD_START_S,
        namespace="llm",
        deployment="chat",
    )
    live = LiveFleet(Fleet(config, on_off_trace(on)))  # not started: the test moves its time with kvpilot's clock
    server = make_server(live, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", live
    finally:
        server.shutdown()


def settings_for(tmp: Path) -> Settings:
    return load_settings(
        store={"database_url": f"sqlite:///{tmp / 'kvpilot.db'}"},
        collector={"interval_s": TICK_S, "timeout_s": 2, "discovery": {"kind": "static"}},
        scaler={
            "mode": "keda",
            "cold_start_s": COLD_START_S,
            "default": {"min_replicas": 0, "max_replicas": 4, "capacity_rps": 5.0},
        },
    )


@dataclass
class Run:
    keda: Keda
    ready: dict[float, int]  # ready replicas at each poll (seconds since START)
    end: float = ON[-1][1]  # when the workload ends and the deployment is deleted (seconds since START)


async def scenario(
    tmp: Path,
    url: str,
    live: LiveFleet,
    *,
    zero_at: float | None = None,
    serve_from: str = "loop",
    on: tuple[tuple[float, float], ...] = ON,
    history: list[RollupPoint] | None = None,
) -> Run:
    """Runs the on/off workload with kvpilot and KEDA, then deletes the Deployment. `zero_at`: an operator (or a
    KEDA with another trigger) sets the Deployment to 0 replicas at that moment, whatever kvpilot answers.
    `serve_from` "process": KEDA is answered by its own process over a mirror of the board (keda.serve_from).
    `on`: the workload's on windows (the simulator's trace must match); `history`: the roll-ups restored at start
    (`yesterday()` by default)."""
    settings = settings_for(tmp)
    clock = VirtualClock(START)
    timer = VirtualTimer(clock)
    scale = Deletable(SimulatorScale(url))
    service, restored = build_service(
        settings,
        Sources(SimulatorTargets(url), StaticTargets([]), simulator_url=url),
        clock=clock,
        sleep=timer.sleep,
        scale=scale,
    )
    stop = asyncio.Event()
    keda: KedaProcess | None = None
    if serve_from == "process":
        # its staleness runs on the wall clock, which this virtual day is not on: off here (test_process.py)
        keda = KedaProcess(service.loop.board, ChildConfig("127.0.0.1:0", ServicerSettings(), 0.0, grace_s=1.0))  # type: ignore[arg-type]
        port = await keda.start()
        serving = asyncio.create_task(keda.run(stop))
    else:
        reader = DecisionReader(service.loop.board, clock, settings.decision_stale_after_s)  # type: ignore[arg-type]
        endpoint = build_endpoint("127.0.0.1:0", reader, ServicerSettings())
        port = endpoint.port
        serving = asyncio.create_task(endpoint.serve(stop, grace_s=1.0))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    run = Run(Keda(stub, f"{url}/control/replicas", replicas=1), {}, on[-1][1])
    await service.start(dataclasses.replace(restored, rollups=yesterday() if history is None else history))

    async def tick() -> None:
        await _asleep(timer)
        _advance(live, clock)  # the simulator reaches the time of the next tick first
        target = service.loop.tick_count + 1
        await timer.advance(TICK_S)
        await _ticked(service, target)
        if keda is not None:
            await keda.synced()  # KEDA polls right after the tick here; the mirror is a pipe away

    try:
        while clock.now() - START < on[-1][1]:
            await tick()
            t = clock.now() - START
            if zero_at is not None and t == zero_at:
                await asyncio.to_thread(set_replicas, run.keda.control, 0)
                run.keda.replicas, run.keda.last_active = 0, -math.inf
            await run.keda.poll(clock.now())
            with live.lock:
                states = [r.state for r in live.fleet.snapshot().replicas]
            run.ready[t] = sum(1 for state in states if state in ("ready", "hung"))
        scale.deleted = True  # the Deployment is deleted: kvpilot forgets it and KEDA is told so
        await tick()
        await run.keda.poll(clock.now())
    finally:
        stop.set()
        service.stop.set()
        waiting = asyncio.ensure_future(service.wait())
        for _ in range(100):  # a tick in flight may wait in virtual time (the collector's spread): move it on
            if waiting.done():
                break
            await timer.advance(1.0)
            await asyncio.sleep(0.01)
        await waiting
        await serving
        await channel.close()
        await scale.inner.aclose()
    return run


def _until_deleted(run: Run) -> list[tuple[float, str]]:
    """KEDA's errors before the deletion; asserts the deletion itself was answered NOT_FOUND."""
    *before, deleted = run.keda.errors or [(math.inf, "no answer at all after the deletion")]
    assert deleted[0] - START >= run.end, run.keda.errors[:5]
    assert deleted[1].startswith("NOT_FOUND"), deleted
    return before


@pytest.mark.parametrize("serve_from", ["loop", "process"])
async def test_answers_stay_valid_at_zero_and_through_the_cold_start(
    tmp_path: Path, simulator: tuple[str, LiveFleet], serve_from: str
) -> None:
    url, live = simulator
    run = await scenario(tmp_path, url, live, zero_at=400.0, serve_from=serve_from)
    # every answer was valid: at zero replicas (no pod, no metrics) and while the first replica loaded
    assert _until_deleted(run) == []
    log = run.keda.log
    at_zero = [t for t, _, _, replicas in log if replicas == 0]
    assert at_zero, "the deployment never stood at zero"
    woke_at = next(t for t, _, active, _ in log if t > at_zero[0] and active)
    assert next(metric for t, metric, _, _ in log if t == woke_at) >= 1  # GetMetrics asks for replicas at zero
    cold = [t for t, _, _, replicas in log if t > woke_at and replicas >= 1 and run.ready[t] == 0]
    assert len(cold) >= COLD_START_S / POLLING_S - 2  # polled all through the cold start, all answered


@pytest.mark.parametrize("serve_from", ["loop", "process"])
async def test_scale_to_zero_and_back_a_cold_start_ahead(
    tmp_path: Path, simulator: tuple[str, LiveFleet], serve_from: str
) -> None:
    url, live = simulator
    run = await scenario(tmp_path, url, live, serve_from=serve_from)
    assert _until_deleted(run) == []
    log = run.keda.log
    zero_at = next((t for t, _, _, replicas in log if replicas == 0), None)
    assert zero_at is not None, "kvpilot never let KEDA scale to zero while demand stayed away"
    assert ON[0][1] <= zero_at < RETURN_S
    woke_at = next(t for t, _, active, _ in log if t > zero_at and active)
    assert next(metric for t, metric, _, _ in log if t == woke_at) >= 1
    # IsActive turned true, and GetMetrics asked for replicas, at least one cold start before demand returned
    assert woke_at <= RETURN_S - COLD_START_S, (woke_at, [e for e in log if e[0] > RETURN_S - 600][:40])


QUIET_ON = ((1500.0, 1800.0),)  # nothing for 25 minutes, then the daily burst
QUIET_RETURN_S = QUIET_ON[0][0]


@pytest.mark.parametrize("simulator", [QUIET_ON], indirect=True)
async def test_the_default_forecaster_wakes_a_deployment_at_zero_from_restored_days(
    tmp_path: Path, simulator: tuple[str, LiveFleet]
) -> None:
    """A restart with the deployment quiet: the only evidence that demand returns at this minute is in the stored
    history of the four days before (each quiet but for the same burst), and nothing is read until it returns.
    The default forecaster (`auto`) scores its models on the restored days as the live loop would have, keeps what
    they showed through the quiet ticks (which are evidence for no model), and wakes the deployment one cold start
    ahead through the KEDA protocol (issue 10; session 19)."""
    url, live = simulator
    run = await scenario(tmp_path, url, live, on=QUIET_ON, history=yesterday(QUIET_ON, days=4))
    assert _until_deleted(run) == []
    log = run.keda.log
    zero_at = next((t for t, _, _, replicas in log if replicas == 0), None)
    assert zero_at is not None, "never at zero while quiet"
    assert zero_at < QUIET_RETURN_S - COLD_START_S
    woke_at = next((t for t, _, active, _ in log if t > zero_at and active), None)
    assert woke_at is not None, "never woken"
    assert next(metric for t, metric, _, _ in log if t == woke_at) >= 1
    assert woke_at <= QUIET_RETURN_S - COLD_START_S, (woke_at, [e for e in log if e[0] > zero_at][:40])


def _advance(live: LiveFleet, clock: VirtualClock) -> None:
    with live.lock:
        live.fleet.advance_to(max(clock.now() + TICK_S - START, live.fleet.time))


async def _asleep(timer: VirtualTimer) -> None:
    for _ in range(6000):
        if timer.sleepers > 0:
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the loop never went to sleep between ticks")


async def _ticked(service: object, target: int) -> None:
    for _ in range(6000):
        if service.loop.tick_count >= target:  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the tick never completed")
