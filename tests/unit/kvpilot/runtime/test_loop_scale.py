"""The control loop with a scale source: a deployment at zero replicas, or loading its first replicas, keeps getting
decisions (so KEDA's answers stay valid), and a deleted one is forgotten (KEDA gets NOT_FOUND).

The service is real (store, write buffer, loop, board) and KEDA is a real gRPC client against the real servicer;
the planner here is a recorder that honours `Planner.decide`'s contract (every key of `current_replicas` is
decided), so these tests pin the loop's side of it whatever the planner's own arithmetic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from collector.clock import VirtualClock
from collector.state import FleetState
from kvpilot.runtime.scale_view import ScaleView
from scaler.decision import Decision
from scaler.keda import externalscaler_pb2 as pb
from scaler.keda import externalscaler_pb2_grpc as pb_grpc
from scaler.keda.reader import DecisionReader
from scaler.keda.server import build_server, register_external_scaler
from scaler.keda.servicer import ExternalScalerServicer
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks

KEY = "llm/chat"


@dataclass
class FakeScale:
    """What the scale subresource says; `deleted` makes the deployment disappear."""

    replicas: int = 0
    deleted: bool = False
    rate: float | None = None
    asked: list[list[str]] = field(default_factory=list)
    fail: bool = False

    async def read(self, known: Collection[str], now: float) -> ScaleView:
        self.asked.append(sorted(known))
        if self.fail:
            raise ConnectionError("apiserver unreachable")
        if self.deleted:
            return ScaleView(gone=frozenset(k for k in known if k == KEY))
        rates = {KEY: self.rate} if self.rate is not None else {}
        return ScaleView(replicas={KEY: self.replicas}, arrival_rates=rates)


@dataclass
class ContractPlanner:
    """Decides every deployment in the state and every key of `current_replicas`: `wanted` replicas each."""

    wanted: int = 0
    calls: list[tuple[dict[str, int] | None, dict[str, float] | None]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        counts = dict(current_replicas) if current_replicas is not None else None
        self.calls.append((counts, dict(arrival_rates) if arrival_rates is not None else None))
        keys = set(state.deployments()) | set(counts or {})
        return [
            Decision(
                deployment=key,
                timestamp=now,
                current_replicas=(counts or {}).get(key, 0),
                ready_replicas=0,
                desired_replicas=self.wanted,
                warm_pool=0,
                reason="predictive" if self.wanted else "hold",
                message="test",
            )
            for key in sorted(keys)
        ]

    def forget(self, key: str) -> None:
        self.forgotten.append(key)


@asynccontextmanager
async def keda_client(board: object, clock: VirtualClock) -> AsyncIterator[pb_grpc.ExternalScalerStub]:
    # the limit `kvpilot run` passes: keda.stale_after_ticks (6) x collector.interval_s (5 s)
    servicer = ExternalScalerServicer(DecisionReader(board, clock, 30.0))  # type: ignore[arg-type]
    server, port = build_server("127.0.0.1:0", [register_external_scaler(servicer)])
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
    finally:
        await channel.close()
        await server.stop(None)


REF = pb.ScaledObjectRef(name="chat", namespace="llm")


async def poll(stub: pb_grpc.ExternalScalerStub) -> tuple[float, bool]:
    """What KEDA does every polling interval: GetMetrics, then IsActive."""
    metrics = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=REF, metricName="kvpilot-replicas"))
    active = await stub.IsActive(REF)
    return metrics.metricValues[0].metricValueFloat, active.result


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


async def test_zero_replicas_keep_fresh_answers_through_scale_from_zero(db: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, replicas=())  # no pod serves metrics: scaled to zero
    scale, planner = FakeScale(replicas=0, rate=0.0), ContractPlanner(wanted=0)
    service, restored, timer = make_service(db, clock, fleet, planner=planner, scale=scale)
    await service.start(restored)
    async with keda_client(service.loop.board, clock) as keda:
        await run_ticks(service, timer, 24)  # 120 s at zero: four times the staleness limit
        assert planner.calls[-1] == ({KEY: 0}, {KEY: 0.0})  # the count and the gateway rate reach the planner
        assert await poll(keda) == (0.0, False)  # a fresh answer: stay at zero
        snapshot = service.snapshot()
        assert snapshot is not None
        assert KEY in snapshot.decisions  # the metrics-api route serves it too

        planner.wanted = 2  # demand forecast within the horizon
        await run_ticks(service, timer, 1)
        assert await poll(keda) == (2.0, True)  # IsActive wakes the deployment from zero

        scale.replicas = 2  # KEDA scaled it; the replicas load for a whole cold start with no metrics
        for _ in range(6):
            await run_ticks(service, timer, 6)  # 180 s of cold start, polled every 30 s
            assert await poll(keda) == (2.0, True)
        assert planner.calls[-1][0] == {KEY: 2}
    service.stop.set()
    await service.wait()


async def test_deleted_deployment_is_forgotten_and_keda_gets_not_found(db: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, replicas=())
    scale, planner = FakeScale(replicas=0), ContractPlanner(wanted=1)
    service, restored, timer = make_service(db, clock, fleet, planner=planner, scale=scale)
    await service.start(restored)
    async with keda_client(service.loop.board, clock) as keda:
        await run_ticks(service, timer, 2)
        assert await poll(keda) == (1.0, True)
        scale.deleted = True
        await run_ticks(service, timer, 1)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await poll(keda)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert planner.forgotten == [KEY]
        await run_ticks(service, timer, 2)
        assert scale.asked[-1] == []  # no longer asked about
        snapshot = service.snapshot()
        assert snapshot is not None
        assert KEY not in snapshot.decisions
    service.stop.set()
    await service.wait()


async def test_a_failing_scale_source_is_counted_and_decisions_follow_what_is_seen(db: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)  # one replica serving metrics
    scale, planner = FakeScale(fail=True), ContractPlanner(wanted=1)
    service, restored, timer = make_service(db, clock, fleet, planner=planner, scale=scale)
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert planner.calls[-1] == (None, None)  # decided from FleetState alone
    board = service.loop.board
    assert board.latest(KEY) is not None  # type: ignore[attr-defined]
    assert service.counters.stage_errors.labels("scale")._value.get() == 2
    service.stop.set()
    await service.wait()
