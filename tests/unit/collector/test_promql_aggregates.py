"""The PromQL source in ``aggregates`` mode against a loopback Prometheus API (tests/services/promapi.py): the
deployments come from Prometheus' aggregates (recorded, else ad hoc, and it says which), only the sick replicas
and faulty GPUs are read series by series, answers are capped, and abort() ends a tick at once."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from collector.aggregates import DeploymentAggregate
from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource, Stopped, from_settings
from collector.promql import decode
from collector.samples import Histogram
from collector.scrape import CollectResult
from collector.state import FleetState
from tests.helpers.raw_servers import Listener, Silent
from tests.services.promapi import T0, FakeFleet, serve

NOW = T0 + 600.0


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[FakeFleet, str]]:
    f = FakeFleet(300, per_deployment=100, sick_every=50, down_every=100)
    server = serve(f)
    yield f, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def _tick(source: PromQLSource, state: FleetState, clock: VirtualClock) -> CollectResult:
    result = await source.collect_once()
    state.observe(result.replicas, result.gpus, now=clock.now(), down_targets=result.down_targets)
    state.observe_deployments(source.last_aggregates, now=clock.now())
    clock.advance(5.0)
    return result


async def test_deployments_come_from_prometheus_and_only_sick_replicas_are_read(fleet: tuple[FakeFleet, str]) -> None:
    f, url = fleet
    clock = VirtualClock(NOW)
    source = PromQLSource(url, mode="aggregates", clock=clock)  # answers read in the reader process (the default)
    state = FleetState()
    adhoc_before = f.calls.get("adhoc", 0)  # the fleet is the module's: another test may have asked ad hoc before
    try:
        results = [await _tick(source, state, clock) for _ in range(3)]
    finally:
        await source.aclose()
    assert source.rules_in_use is True
    assert f.calls.get("adhoc", 0) == adhoc_before
    deployments = state.deployments()
    assert sorted(deployments) == ["prod/llm-0", "prod/llm-1", "prod/llm-2"]
    d0 = deployments["prod/llm-0"]
    # 100 replicas, one down (index 13): the counts come from `up`, not from the few replicas read one by one
    assert (d0.replica_count, d0.ready_replicas) == (100, 99)
    assert d0.arrival_rate is not None
    assert d0.arrival_rate > 0
    assert d0.ttft_window is not None
    assert d0.ttft_window.count > 0
    assert d0.kv_usage_max is not None
    assert d0.kv_usage_max >= 0.85  # a sick replica's pool
    # per replica: the sick ones (2 per deployment of 100), each with its full sample and its deployment
    sick = sorted(r.key for r in state.replicas())
    assert sick == sorted(f"prod/llm-{i // 100}-{i % 100}" for i in f.sick.tolist())
    assert {r.deployment_key for r in state.replicas()} <= set(deployments)
    assert all(r.sample.ttft is not None for r in state.replicas())
    # the down replica is a failed target; the faulty GPU is read, the healthy ones are not
    assert sorted(t.pod for t in results[-1].down_targets) == sorted(
        f"llm-{i // 100}-{i % 100}" for i in f.down.tolist()
    )
    assert len(state.gpus()) == len(f.faulty_gpus)
    history = state.deployment_history("prod/llm-0")
    assert [p.replica_count for p in history] == [100, 100, 100]


async def test_without_the_rules_the_same_expressions_run_ad_hoc_and_it_says_so(
    fleet: tuple[FakeFleet, str], caplog: pytest.LogCaptureFixture
) -> None:
    f, url = fleet
    f.rules = False
    clock = VirtualClock(NOW)
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread")
    state = FleetState()
    try:
        with caplog.at_level("INFO", logger="collector.discovery.promql"):
            await _tick(source, state, clock)
        adhoc_before = f.calls.get("adhoc", 0)
        await _tick(source, state, clock)
    finally:
        f.rules = True
        await source.aclose()
    assert source.rules_in_use is False
    assert "not installed" in caplog.text
    # checked once, then ad hoc every tick until the next re-check
    assert f.calls["adhoc"] == adhoc_before + 1
    assert state.deployments()["prod/llm-1"].replica_count == 100


async def test_an_answer_over_the_cap_fails_the_tick_with_the_setting_named(fleet: tuple[FakeFleet, str]) -> None:
    _, url = fleet
    source = PromQLSource(url, mode="aggregates", max_answer_bytes=4096, clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match="max_answer_bytes"):
            await source.collect_once()
    finally:
        await source.aclose()


async def test_abort_ends_a_tick_waiting_on_prometheus_at_once() -> None:
    # A Prometheus that accepts and never answers: without abort the tick would wait out its timeout.
    server = Silent()
    source = PromQLSource(server.url, timeout_s=60.0, clock=VirtualClock(NOW))
    tick = asyncio.ensure_future(source.collect_once())
    try:
        assert await asyncio.to_thread(server.accepted.wait, 30.0)
        source.abort()
        with pytest.raises(Stopped):
            await asyncio.wait_for(tick, 5.0)
        with pytest.raises(Stopped):  # and every later tick stops before sending anything
            await source.collect_once()
    finally:
        await source.aclose()
        server.close()


def test_settings_bound_every_query() -> None:
    class Discovery:
        promql_url = "http://prom:9090"
        promql_mode = "aggregates"
        promql_max_answer_bytes = 1 << 20
        promql_max_replicas = 7
        promql_selector = 'namespace="prod"'

    class Collector:
        timeout_s = 1.5
        rate_window_s = 120.0

    source = from_settings(Discovery(), Collector(), kv_from=0.5)
    assert (source.timeout_s, source.window, source.max_answer_bytes) == (1.5, "120s", 1 << 20)
    assert source._client.timeout.read == 1.5
    with pytest.raises(ValueError, match="promql_mode"):
        PromQLSource("http://x", mode="everything")  # type: ignore[arg-type]


def test_aggregate_histograms_are_cumulative_and_need_an_inf_bucket() -> None:
    def series(signal: str, value: float, **extra: str) -> dict[str, Any]:
        metric = {"namespace": "ns", "deployment": "d", "kvpilot_signal": signal, **extra}
        return {"metric": metric, "value": [NOW, repr(value)]}

    answer = [
        series("ttft_bucket", 10.0, le="0.1"),
        series("ttft_bucket", 9.999, le="1"),  # increase() extrapolated a hair below the bucket under it
        series("ttft_bucket", 12.0, le="+Inf"),
        series("itl_bucket", 3.0, le="0.1"),  # no +Inf bucket: unusable
        series("replicas", 4.0),
        series("kv_usage_max", math.nan),
        {"metric": {"kvpilot_signal": "replicas"}, "value": [NOW, "1"]},  # no deployment: ignored
    ]
    (agg,) = decode.aggregates(answer, NOW)
    assert isinstance(agg, DeploymentAggregate)
    assert agg.ttft_window == Histogram(bounds=(0.1, 1.0, math.inf), counts=(10.0, 10.0, 12.0), sum=0.0, count=12.0)
    assert agg.itl_window is None
    assert (agg.replicas, agg.kv_usage_max) == (4, None)


def test_an_error_answer_names_prometheus_error() -> None:
    with pytest.raises(PromQLError, match="bad_data: parse error"):
        decode.answer(b'{"status":"error","errorType":"bad_data","error":"parse error"}', "http://prom")
    with pytest.raises(PromQLError, match="not JSON"):
        decode.answer(b"<html>", "http://prom")


class _Dribbling(Listener):
    """Answers with a head announcing 100,000 bytes, then a byte every 50 ms until ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not self.done.wait(0.05):
                conn.sendall(b" ")
            conn.close()


async def test_a_dribbling_answer_is_cut_at_the_timeout() -> None:
    # Each read arrives well within the timeout, the whole answer never does: collector.timeout_s bounds the query.
    server = _Dribbling()
    source = PromQLSource(server.url, timeout_s=0.5, clock=VirtualClock(NOW))
    try:
        with pytest.raises(PromQLError, match=r"within collector.timeout_s \(0.5 s\)"):
            await source.collect_once()
    finally:
        server.done.set()
        await source.aclose()
        server.close()


async def test_a_failed_round_keeps_the_last_aggregates_and_fleetstate_ages_them(fleet: tuple[FakeFleet, str]) -> None:
    # Prometheus away: the deployments are not rebuilt from the few sick replicas (which would read as a deployment
    # of two replicas); their last aggregates stay, then count no replica ready, then are dropped.
    _, url = fleet
    clock = VirtualClock(NOW)
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread")
    try:
        await source.collect_once()
        kept = list(source.last_aggregates)
        source.url = "http://127.0.0.1:9"  # nothing listens there
        with pytest.raises(PromQLError):
            await source.collect_once()
    finally:
        await source.aclose()
    assert source.last_aggregates == kept
    state = FleetState(stale_after_s=30, forget_after_s=300)
    ready = []
    for age in (10.0, 60.0, 400.0):
        state.observe([], [], now=NOW + age)
        state.observe_deployments(source.last_aggregates, now=NOW + age)
        view = state.deployments().get("prod/llm-0")
        ready.append(None if view is None else view.ready_replicas)
    assert ready == [99, 0, None]


def test_the_loopback_prometheus_answers_only_the_names_the_query_matches_in_full() -> None:
    """As Prometheus does (its ``=~`` is anchored): a sick replica's answer holds the families kvpilot reads, not
    every series the replica serves; before, the loopback server sent both and doubled the bench's answers."""
    import re

    import orjson

    from collector.adapt import WANTED_FAMILIES
    from collector.promql import expressions as ex
    from collector.promql.series import names_regex

    f = FakeFleet(300, per_deployment=100, sick_every=50, down_every=100)

    def names(families: frozenset[str]) -> set[str]:
        query = ex.replica_series(names_regex(families), "60s", "", kv_from=0.4, limit=500)
        return {s["metric"]["__name__"] for s in orjson.loads(f.render(query, NOW))["data"]["result"]}

    # one family asked: its series only
    assert names(frozenset({"vllm:kv_cache_usage_perc"})) == {"vllm:kv_cache_usage_perc"}
    # every family kvpilot reads: a name the regex matches only in part (request_prompt_tokens_bucket contains
    # prompt_tokens) is left out, and the families read are all there
    engines = WANTED_FAMILIES - {n for n in WANTED_FAMILIES if n.startswith("DCGM_")}
    got = names(frozenset(engines))
    assert "vllm:request_prompt_tokens_bucket" not in got
    assert {"vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_running"} <= got
    assert all(re.fullmatch(names_regex(engines), n) for n in got)


async def test_sick_replicas_faulty_gpus_and_down_targets_come_in_one_request_read_as_when_asked_apart() -> None:
    # one union per tick instead of three queries: the same targets, replicas, GPUs and down targets as reading the
    # three answers apart (the ``up == 0`` part tagged, the tag gone from what is read)
    from collector.promql.series import read_answers

    f = FakeFleet(600, per_deployment=100, sick_every=50, down_every=100)  # faulty GPUs at 21 and 521
    server = serve(f)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    requests: list[str] = []

    async def count(request: Any) -> None:
        requests.append(request.url.path)

    client = httpx.AsyncClient(timeout=10, event_hooks={"request": [count]})
    source = PromQLSource(url, mode="aggregates", clock=VirtualClock(NOW), reader="thread", client=client)
    try:
        await source.collect_once()  # first tick: metadata
        requests.clear()
        f.log.clear()
        result = await source.collect_once()
    finally:
        await source.aclose()
        await client.aclose()
        server.shutdown()
    assert requests == ["/api/v1/query"] * 2  # the recorded deployments, and one for everything read per replica
    parts = {kind: query for kind, query, _ in f.log}
    # AMD's: none in this NVIDIA fleet; the vanished GPUs were asked for by the first tick (once a minute)
    assert sorted(parts) == ["amd_gpus", "down", "gpus", "rules", "sick"]
    apart = read_answers(
        [(kind, f.render(parts[kind], NOW)) for kind in ("sick", "gpus", "amd_gpus")],
        [("down", f.render(parts["down"], NOW))],
        source._metadata,
        NOW,
        frozenset(),
        0.0,
    )

    def read(results: Any) -> dict[str, tuple[Any, ...]]:
        return {r.target.url: (r.target, r.ok, r.error, r.replicas, r.gpus) for r in results}

    assert read(result.results) == read(apart)
    assert (len(result.down_targets), len(result.gpus) > 0, len(result.replicas) > 0) == (6, True, True)


def test_amd_gpu_families_stay_out_of_the_replicas_query() -> None:
    # AMD's device-metrics-exporter labels a GPU with the pod using it (pod, namespace): in the replicas' query
    # (`... and on (namespace, pod) (sick replicas)`) its series would join that replica's. They go with the GPU
    # exporters' families, as DCGM's do (session 17, helper A).
    from collector.discovery.promql import _gpu_families
    from collector.gpus import amd

    gpus = _gpu_families()
    assert {"gpu_gfx_activity", "amd_gpu_gfx_activity", "amd_gpu_use_percent", "DCGM_FI_DEV_GPU_UTIL"} <= gpus
    assert gpus >= amd.DME_FAMILIES | amd.SMI_FAMILIES
    assert "vllm:num_requests_running" not in gpus
