"""``aggregates`` mode: a deployment series whose value or bucket bound (``le``) is no number costs that series only.
One engine page with ``le="x"``, summed by the ad hoc query, or a value a query layer wrote as text, was a
ValueError out of ``decode.aggregates``: not a PromQLError, so the loop logged a traceback and the whole tick had no
samples, every tick, for every deployment (session 29 helper F, hostile and parallel input round 14)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from tests.services.promapi import T0, FakeFleet, serve

NOW = T0 + 600.0


class _Garbled(FakeFleet):
    """Answers as FakeFleet, but in the deployments' series llm-1's first ``le`` is ``x`` and llm-2's ``kv_usage_max``
    is ``abc``."""

    def _aggregate_text(self, t: float, *, named: bool, matchers: tuple[tuple[str, str, str], ...] = ()) -> list[str]:
        items = super()._aggregate_text(t, named=named, matchers=matchers)
        bucket = next(i for i, s in enumerate(items) if '"deployment":"llm-1"' in s and '"le":"' in s)
        items[bucket] = items[bucket].replace('"le":"', '"le":"x', 1)
        kv = next(
            i for i, s in enumerate(items) if '"deployment":"llm-2"' in s and '"kvpilot_signal":"kv_usage_max"' in s
        )
        head, _ = items[kv].rsplit(",", 1)
        items[kv] = head + ',"abc"]}'
        return items


@pytest.fixture(scope="module")
def urls() -> Iterator[tuple[str, str]]:
    clean, garbled = FakeFleet(300, per_deployment=100), _Garbled(300, per_deployment=100)
    servers = [serve(clean), serve(garbled)]
    yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    for s in servers:
        s.shutdown()


async def _ticks(url: str, n: int) -> tuple[PromQLSource, list[int]]:
    clock = VirtualClock(NOW)
    source = PromQLSource(url, mode="aggregates", clock=clock, reader="thread")
    replicas = []
    try:
        for _ in range(n):
            result = await source.collect_once()
            replicas.append(len(result.replicas))
            clock.advance(5.0)
    finally:
        await source.aclose()
    return source, replicas


async def test_a_series_that_is_no_number_costs_only_itself(
    urls: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    clean_url, garbled_url = urls
    clean, clean_replicas = await _ticks(clean_url, 2)
    with caplog.at_level("WARNING", logger="collector.discovery.promql"):
        garbled, replicas = await _ticks(garbled_url, 2)
    # the tick keeps its sick replicas and every deployment
    assert replicas == clean_replicas
    assert replicas[-1] > 0
    want = {a.key: a for a in clean.last_aggregates}
    got = {a.key: a for a in garbled.last_aggregates}
    assert sorted(got) == sorted(want) == ["prod/llm-0", "prod/llm-1", "prod/llm-2"]
    assert got["prod/llm-0"] == want["prod/llm-0"]
    # llm-2: only kv_usage_max is lost
    assert want["prod/llm-2"].kv_usage_max is not None
    assert got["prod/llm-2"] == dataclasses.replace(want["prod/llm-2"], kv_usage_max=None)
    # llm-1: its TTFT histogram without the bucket whose bound is no number, the rest as read
    ttft, clean_ttft = got["prod/llm-1"].ttft_window, want["prod/llm-1"].ttft_window
    assert ttft is not None
    assert clean_ttft is not None
    assert ttft.bounds == clean_ttft.bounds[1:]
    assert got["prod/llm-1"] == dataclasses.replace(want["prod/llm-1"], ttft_window=ttft)
    # said once over the two ticks, with what was left out
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 1
    assert "2 deployment series left out" in said[0]


class _Negative(FakeFleet):
    """Answers as FakeFleet, but llm-0's replica count (``count(up)``) is -5, as a recording rule gone wrong could
    write it (Prometheus' own count never does)."""

    def _aggregate_text(self, t: float, *, named: bool, matchers: tuple[tuple[str, str, str], ...] = ()) -> list[str]:
        items = super()._aggregate_text(t, named=named, matchers=matchers)
        count = next(
            i for i, s in enumerate(items) if '"deployment":"llm-0"' in s and '"kvpilot_signal":"replicas"' in s
        )
        head, _ = items[count].rsplit(",", 1)
        items[count] = head + ',"-5"]}'
        return items


async def test_a_negative_replica_count_is_none_and_said(caplog: pytest.LogCaptureFixture) -> None:
    fleet = _Negative(300, per_deployment=100)
    server = serve(fleet)
    try:
        with caplog.at_level("WARNING", logger="collector.discovery.promql"):
            source, _ = await _ticks(f"http://127.0.0.1:{server.server_address[1]}", 1)
    finally:
        server.shutdown()
    got = {a.key: a for a in source.last_aggregates}
    assert got["prod/llm-0"].replicas == 0  # before: -5 replicas handed to the planner and the snapshot
    assert got["prod/llm-1"].replicas == 100
    (said,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert "a count or rate below 0" in said
    assert '"deployment": "llm-0"' in said or "llm-0" in said
