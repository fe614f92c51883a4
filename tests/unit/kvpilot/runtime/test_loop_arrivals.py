"""The control loop with a gateway's request counter (``collector.arrivals``): its rate and count reach the planner
for every deployment it names, those at zero replicas included (one never decided before is asked of the scale
source); a deployment it does not name keeps the engines' estimate; a failed read is counted and logged, and that
tick is decided on the engines' estimate. The service is real (store, loop, board); the gateway is a double of
``GatewayArrivals``, and the last test runs the real planner `kvpilot run` builds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from sqlalchemy import select

from collector.clock import VirtualClock
from collector.promql.decode import PromQLError
from collector.state import FleetState
from kvpilot.runtime.arrivals import Arrivals
from scaler.decision import Decision
from store.db import transaction
from store.models import RollupRow
from tests.helpers.poll import until
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, ContractPlanner, FakeScale

ASLEEP = "llm/batch"  # a deployment at zero replicas that kvpilot has never decided: only the gateway names it


@dataclass
class Gateway:
    """What ``GatewayArrivals.read`` hands the loop: a fixed rate per deployment, totals that grow with it."""

    rates: dict[str, float]
    fail: bool = False
    reads: int = 0

    async def read(self, now: float, at: float) -> Arrivals:
        self.reads += 1
        if self.fail:
            raise PromQLError("http://prometheus:9090: HTTP 503: service unavailable")
        return Arrivals(rates=dict(self.rates), totals={k: v * (now - START) for k, v in self.rates.items()})


@dataclass
class TotalsPlanner(ContractPlanner):
    """``ContractPlanner`` that also takes the gateway's counts, as ``scaler.planner.Planner`` does."""

    totals: list[dict[str, float] | None] = field(default_factory=list)

    def decide(
        self,
        state: FleetState,
        now: float,
        *,
        current_replicas: Mapping[str, int] | None = None,
        arrival_rates: Mapping[str, float] | None = None,
        arrivals_totals: Mapping[str, float] | None = None,
    ) -> list[Decision]:
        self.totals.append(dict(arrivals_totals) if arrivals_totals is not None else None)
        return super().decide(state, now, current_replicas=current_replicas, arrival_rates=arrival_rates)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kvpilot.db'}"


def _errors(service: object) -> float:
    return float(service.loop.metrics.stage_errors.labels("arrivals")._value.get())  # type: ignore[attr-defined]


class ZeroOrAsleep(FakeScale):
    """The scale subresource: llm/chat at ``replicas``, llm/batch at zero (it exists, nobody decided it yet)."""

    async def read(self, known, now):  # type: ignore[no-untyped-def]
        view = await super().read(known, now)
        replicas = dict(view.replicas)
        if ASLEEP in known:
            replicas[ASLEEP] = 0
        return type(view)(replicas=replicas, gone=view.gone, arrival_rates=view.arrival_rates)


async def test_the_gateway_feeds_deployments_at_zero_replicas(db: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock, replicas=())  # no replica serves metrics: the engines see nothing
    scale, planner = ZeroOrAsleep(replicas=0), TotalsPlanner()
    gateway = Gateway({KEY: 12.0, ASLEEP: 3.0})
    service, restored, timer = make_service(db, clock, fleet, planner=planner, scale=scale, arrivals=gateway)
    await service.start(restored)
    await run_ticks(service, timer, 3)
    counts, rates = planner.calls[-1]
    assert counts == {KEY: 0, ASLEEP: 0}  # the deployment only the gateway names was asked of the scale source
    assert rates == {KEY: 12.0, ASLEEP: 3.0}
    elapsed = clock.now() - START
    assert planner.totals[-1] == {KEY: pytest.approx(12.0 * elapsed), ASLEEP: pytest.approx(3.0 * elapsed)}
    snapshot = service.snapshot()
    assert snapshot is not None
    assert {KEY, ASLEEP} <= set(snapshot.decisions)
    service.stop.set()
    await service.wait()


async def test_a_name_the_gateway_maps_to_no_deployment_is_not_asked_for_ever(db: str) -> None:
    clock = VirtualClock(START)
    scale, gateway = ZeroOrAsleep(replicas=1), Gateway({KEY: 2.0, ASLEEP: 1.0, "llm/no-such": 1.0})
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), planner=TotalsPlanner(), scale=scale, arrivals=gateway
    )
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert scale.asked[-1] == [ASLEEP, KEY, "llm/no-such"]
    gateway.rates = {KEY: 2.0}  # the gateway names neither any more
    await run_ticks(service, timer, 2)
    assert scale.asked[-1] == [ASLEEP, KEY]  # the Deployment it counted (at zero) stays known; the other is not asked
    service.stop.set()
    await service.wait()


async def test_the_gateway_rate_beats_the_scale_sources_and_only_where_it_names(db: str) -> None:
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)
    scale, planner = FakeScale(replicas=1, rate=99.0), TotalsPlanner()
    service, restored, timer = make_service(
        db, clock, fleet, planner=planner, scale=scale, arrivals=Gateway({KEY: 7.0})
    )
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert planner.calls[-1][1] == {KEY: 7.0}
    service.stop.set()
    await service.wait()
    # a gateway that names other deployments leaves llm/chat to what it had: the scale source's rate here, the
    # engines' estimate (no rate passed) where there is none
    clock, planner = VirtualClock(START), TotalsPlanner()
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), planner=planner, scale=FakeScale(replicas=1), arrivals=Gateway({"x/y": 1.0})
    )
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert KEY not in (planner.calls[-1][1] or {})
    assert KEY not in (planner.totals[-1] or {})
    service.stop.set()
    await service.wait()


async def test_a_failed_read_is_counted_said_and_decided_on_the_engines(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock(START)
    scale, planner = FakeScale(replicas=1), TotalsPlanner()
    gateway = Gateway({KEY: 12.0})
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), planner=planner, scale=scale, arrivals=gateway
    )
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert planner.calls[-1][1] == {KEY: 12.0}
    assert _errors(service) == 0
    gateway.fail = True
    with caplog.at_level(logging.ERROR, logger="kvpilot.runtime.loop"):
        await run_ticks(service, timer, 3)
    assert _errors(service) == 3  # kvpilot_loop_stage_errors_total{stage="arrivals"}
    assert planner.calls[-1][1] is None
    assert planner.totals[-1] is None
    said = [r.getMessage() for r in caplog.records]
    assert sum("reading the gateway's request counter failed" in m and "HTTP 503" in m for m in said) == 3
    assert all(r.exc_info is None for r in caplog.records)  # one line each, no traceback
    gateway.fail = False
    await run_ticks(service, timer, 1)
    assert planner.calls[-1][1] == {KEY: 12.0}
    service.stop.set()
    await service.wait()


async def test_without_a_scale_source_the_gateway_still_feeds_the_replicas_seen(db: str) -> None:
    clock = VirtualClock(START)
    planner = TotalsPlanner()
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), planner=planner, arrivals=Gateway({KEY: 5.0})
    )
    await service.start(restored)
    await run_ticks(service, timer, 2)
    assert planner.calls[-1][1] == {KEY: 5.0}
    assert planner.totals[-1] == {KEY: pytest.approx(5.0 * (clock.now() - START))}
    service.stop.set()
    await service.wait()


async def test_the_real_planner_wakes_a_deployment_at_zero_on_the_gateways_requests(db: str) -> None:
    """`kvpilot run`'s planner (built from settings) for llm/chat at zero replicas with `min_replicas: 0`: engines-fed
    it has nothing to read and stays at zero; the gateway's 20 requests/s ask for replicas before any serves."""
    overrides: dict[str, object] = {"scaler": {"default": {"min_replicas": 0, "capacity_rps": 5.0}}}
    wanted = {}
    for fed in ("engines", "gateway"):
        clock = VirtualClock(START)
        gateway = Gateway({KEY: 20.0}) if fed == "gateway" else None
        service, restored, timer = make_service(
            db.replace(".db", f"-{fed}.db"),
            clock,
            ScriptedFleet(clock, replicas=()),
            overrides=overrides,
            scale=FakeScale(replicas=0),
            arrivals=gateway,
        )
        await service.start(restored)
        await run_ticks(service, timer, 12)
        snapshot = service.snapshot()
        assert snapshot is not None
        wanted[fed] = snapshot.decisions[KEY].desired_replicas
        if fed == "gateway":  # /metrics: the rate the planner read, beside the engines' estimate
            page = generate_latest(service.registry).decode()
            assert 'kvpilot_planner_arrival_rate{deployment="llm/chat"} 20.0' in page
        service.stop.set()
    await service.wait()
    assert wanted["engines"] == 0
    assert wanted["gateway"] >= 4  # 20 requests/s at 5 a replica


async def _killed(service: object) -> None:
    """SIGKILL: no shutdown path runs; what the writer flushed stays."""
    tasks = service.tasks  # type: ignore[attr-defined]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_restart_warms_the_forecasters_from_the_gateways_minutes(db: str) -> None:
    """A loop fed by the gateway stores the rate its planner read: after a restart each forecaster warms from the
    gateway's minutes (20 requests/s for llm/chat, whose one replica finishes 4 a second; 3 for llm/batch, at zero
    replicas, which the engines never see), not from the engines' estimate it no longer reads."""
    clock = VirtualClock(START)
    fleet = ScriptedFleet(clock)  # one replica finishing 4 requests/s: the engines' estimate
    first, restored, timer = make_service(
        db, clock, fleet, scale=ZeroOrAsleep(replicas=1), arrivals=Gateway({KEY: 20.0, ASLEEP: 3.0})
    )
    await first.start(restored)
    await run_ticks(first, timer, 30)  # two and a half minutes of 5 s ticks
    await until(lambda: first.writer.pending == 0, what="flushed")
    await _killed(first)

    clock.advance(7)
    second, restored, timer = make_service(db, clock, fleet, scale=ZeroOrAsleep(replicas=1))
    minutes = {p.deployment: p for p in restored.rollups}  # the newest minute of each
    assert minutes[KEY].values["arrival_rate"] == pytest.approx(4.0, rel=0.3)  # the engines' estimate, kept
    assert minutes[KEY].values["planner_arrival_rate"] == pytest.approx(20.0)
    assert minutes[KEY].values["gateway_arrival_share"] == 1.0
    assert minutes[ASLEEP].values["planner_arrival_rate"] == pytest.approx(3.0)
    await second.start(restored)
    planner = second.loop.planner  # type: ignore[attr-defined]
    assert planner.planner_for(KEY).forecaster.predict(60).point == pytest.approx(20.0, rel=0.2)
    assert planner.planner_for(ASLEEP).forecaster.predict(60).point == pytest.approx(3.0, rel=0.2)
    second.stop.set()
    await second.wait()


async def test_a_minute_the_gateway_failed_in_is_stored_as_read(db: str) -> None:
    """The gateway read failed for some of a minute's ticks: the planner read the engines' estimate then, and the
    minute stores that mix (the mean of what was read, and the gateway's share of it)."""
    clock = VirtualClock(START + 60 - START % 60)  # ten ticks within one minute
    gateway = Gateway({KEY: 20.0})
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), scale=FakeScale(replicas=1), arrivals=gateway
    )
    await service.start(restored)
    await run_ticks(service, timer, 5)
    gateway.fail = True
    await run_ticks(service, timer, 5)
    await until(lambda: service.writer.pending == 0, what="flushed")
    with transaction(service.sessions) as s:
        row = s.scalars(select(RollupRow).where(RollupRow.deployment == KEY).order_by(RollupRow.minute)).first()
        assert row is not None
        share, read, engines, samples = (
            row.gateway_arrival_share,
            row.planner_arrival_rate,
            row.arrival_rate,
            row.samples,
        )
    assert samples >= 10
    assert share is not None
    assert 0.3 < share < 0.7
    assert read is not None
    assert engines is not None
    assert read == pytest.approx(share * 20.0 + (1 - share) * engines, rel=0.05)
    service.stop.set()
    await service.wait()


async def test_a_gateway_naming_thousands_of_unknown_deployments_asks_for_the_busiest_only(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A mapping that names what are no Deployments (a path label: 5,000 values) asked the scale source about every
    one of them each tick (one Kubernetes list per namespace); the busiest GATEWAY_ONLY_ASKED are asked, said once."""
    from kvpilot.runtime.loop import GATEWAY_ONLY_ASKED

    clock = VirtualClock(START)
    rates = {f"p{i}/x": 1.0 + i / 10_000 for i in range(5_000)} | {KEY: 5.0}
    scale = FakeScale(replicas=1)
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), planner=TotalsPlanner(), scale=scale, arrivals=Gateway(rates)
    )
    await service.start(restored)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.loop"):
        await run_ticks(service, timer, 3)
    asked = set(scale.asked[-1])
    assert KEY in asked
    assert len(asked - {KEY}) == GATEWAY_ONLY_ASKED
    assert "p4999/x" in asked  # the busiest
    assert sum("names 5000 deployments kvpilot does not know" in r.getMessage() for r in caplog.records) == 1
    service.stop.set()
    await service.wait()
