"""The PromQL source asks each tick's queries at the tick's time on the Prometheus API's clock (its answers' Date
header, as collector.arrivals does since 1a8bdd1). Prometheus answers an instant query with each series' newest sample
of the lookback (5 minutes) before the ``time`` asked: asked at kvpilot's time, a server an hour behind answered an
empty fleet every tick, and one an hour ahead samples an hour old (issue 17, session 30 helper G)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate
from typing import Literal

import pytest
from prometheus_client import CollectorRegistry

from collector.discovery.promql import PromQLSource
from kvpilot.runtime.scale_ksm import KubeStateMetricsScale
from kvpilot.runtime.scale_view import deployment_rollout
from tests.services.promapi import FakeFleet, serve
from tests.unit.kvpilot.runtime.ksm_double import deployment, ksm_series, ksm_up

LOOKBACK_S = 300.0  # Prometheus' default --query.lookback-delta
HISTORY_S = 600.0  # the server has scraped the fleet for the last 10 minutes of its clock


class _OffClock(FakeFleet):
    """The fleet as a Prometheus ``offset_s`` behind this host's clock (negative: ahead) holds it: sampled for the
    last ``HISTORY_S`` of its clock, an instant query answering what was sampled within the lookback before the time
    asked (nothing asked past its newest samples' lookback, or before its first)."""

    def __init__(self, offset_s: float) -> None:
        super().__init__(4, per_deployment=4, sick_every=3, down_every=5)
        self.offset_s = offset_s

    def render(self, query: str, t: float) -> bytes:
        newest = time.time() - self.offset_s
        if newest - HISTORY_S <= t and t - LOOKBACK_S <= newest:
            return super().render(query, min(t, newest))
        return b'{"status":"success","data":{"resultType":"vector","result":[]}}'


@contextmanager
def _prometheus(offset_s: float, fleet: _OffClock | None = None) -> Iterator[str]:
    fleet = fleet or _OffClock(offset_s)
    server = serve(fleet)

    def date_time_string(handler: object, timestamp: float | None = None) -> str:
        return formatdate(time.time() - offset_s, usegmt=True)

    server.RequestHandlerClass.date_time_string = date_time_string  # type: ignore[attr-defined]  # on its clock
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _read(url: str, mode: Literal["replicas", "aggregates"], ticks: int) -> list[tuple[list[str], list[str]]]:
    """Each tick's targets read and deployments aggregated."""
    source = PromQLSource(url, mode=mode, reader="thread", timeout_s=5.0)
    read = []
    try:
        for _ in range(ticks):
            result = await source.collect_once()
            deployments = sorted(f"{a.namespace}/{a.deployment}" for a in source.last_aggregates)
            read.append((sorted(r.target.url for r in result.results), deployments))
    finally:
        await source.aclose()
    return read


@pytest.mark.parametrize("mode", ["replicas", "aggregates"])
@pytest.mark.parametrize("offset_s", [3600.0, -3600.0])  # an hour behind, an hour ahead
async def test_a_server_an_hour_off_is_asked_at_its_own_time(
    offset_s: float, mode: Literal["replicas", "aggregates"]
) -> None:
    with _prometheus(0.0) as url:
        [agreeing] = await _read(url, mode, 1)
    assert agreeing[0] or agreeing[1]  # the fleet reads where the clocks agree
    with _prometheus(offset_s) as url:
        read = await _read(url, mode, 3)
    # every tick reads the fleet as where the clocks agree (before 9fbe52f: an empty fleet every tick; before
    # session 31, the first tick, asked before any answer gave the server's clock)
    assert read == [agreeing] * 3


@pytest.mark.parametrize("offset_s", [3600.0, -3600.0])
async def test_the_offset_asked_at_is_on_metrics(offset_s: float) -> None:
    """An operator sees what the source allows for (before, one log line per process said it): a server an hour
    behind reads -3600 on ``kvpilot_promql_clock_offset_seconds``; one whose clock agrees, 0."""
    readings = {}
    for skew in (0.0, offset_s):
        with _prometheus(skew) as url:
            source = PromQLSource(url, mode="aggregates", reader="thread", timeout_s=5.0)
            registry = CollectorRegistry()
            source.register_metrics(registry)
            try:
                await source.collect_once()
            finally:
                await source.aclose()
        readings[skew] = registry.get_sample_value("kvpilot_promql_clock_offset_seconds")
    assert readings[0.0] == 0.0
    assert readings[offset_s] == pytest.approx(-offset_s, abs=2.0)


@pytest.mark.parametrize("offset_s", [3600.0, -3600.0])
async def test_kube_state_metrics_is_asked_at_the_servers_time(offset_s: float) -> None:
    """The kube-state-metrics reader asks through the source (``query_vector``) on the server's clock too, its first
    read included: before, at kvpilot's time always, so a Prometheus an hour behind had no Deployment series and the
    rollouts were seen from the replicas alone, and none was told deleted (the exporter's ``up`` unanswered)."""
    fleet = _OffClock(offset_s)
    a, b = deployment("a", replicas=2), deployment("b", replicas=3)
    fleet.ksm = [*ksm_series(a), *ksm_series(b), ksm_up()]
    with _prometheus(offset_s, fleet) as url:
        source = PromQLSource(url, reader="thread", timeout_s=5.0)
        scale = KubeStateMetricsScale(source.query_vector)
        try:
            first = await scale.read(["llm/a", "llm/b"], time.time())  # before any tick
            fleet.ksm = [*ksm_series(a), ksm_up()]  # b deleted; its exporter answers
            second = await scale.read(["llm/a", "llm/b"], time.time())
        finally:
            await source.aclose()
    assert dict(first.replicas) == {"llm/a": 2, "llm/b": 3}
    assert dict(first.rollouts) == {"llm/a": deployment_rollout(a), "llm/b": deployment_rollout(b)}
    assert (dict(second.replicas), second.gone) == ({"llm/a": 2}, frozenset({"llm/b"}))
