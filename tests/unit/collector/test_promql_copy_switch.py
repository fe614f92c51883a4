"""A counter read from the other Prometheus copy of an HA pair for a tick (its server scraped a few seconds earlier,
so its counter is behind) is no restart (review G, session 18 round 7: its test, first case; on f6f95f6 the arrival
rate read [None, 2.0, 10001.5, 6669.3] for 2 req/s). A counter going down on the same copy still is one."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLSource
from collector.promql.copies import CopySwitches, even_histogram
from collector.promql.series import read_answers
from collector.samples import Histogram
from collector.state import FleetState

META = {"vllm:request_success": "counter", "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge"}


def _answer(t: float, copies: list[tuple[str, float]]) -> bytes:
    result = []
    for replica, finished in copies:
        base = {
            "job": "vllm",
            "instance": "10.0.0.1:8000",
            "namespace": "llm",
            "pod": "chat-0",
            "deployment": "chat",
            "prometheus_replica": replica,
        }
        result += [
            {
                "metric": {**base, "__name__": "vllm:request_success_total", "finished_reason": "stop"},
                "value": [t, str(finished)],
            },
            {"metric": {**base, "__name__": "vllm:num_requests_running"}, "value": [t, "3"]},
            {"metric": {**base, "__name__": "vllm:num_requests_waiting"}, "value": [t, "0"]},
            {"metric": {**base, "__name__": "up"}, "value": [t, "1"]},
        ]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def _arrival_rates(ticks: list[tuple[float, list[tuple[str, float]]]]) -> list[float | None]:
    """What PromQLSource does each tick (read_answers with the copies last read, then CopySwitches), into FleetState."""
    state, copies = FleetState(rate_window_s=60.0), CopySwitches()
    rates = []
    for t, answer in ticks:
        results = read_answers(
            [("q", _answer(t, answer))],
            None,
            META,
            t,
            frozenset({"vllm"}),
            time.perf_counter(),
            prefer=copies.prefer(),
        )
        results = copies.apply(results, t)
        state.observe([s for r in results if r.ok for s in r.replicas], [], now=t)
        rates.append(state.deployments()["llm/chat"].arrival_rate)
    return rates


def test_a_counter_read_from_the_other_copy_for_a_tick_is_no_restart() -> None:
    # review G's test (/tmp/s18/G/test_copies_counter_switch.py), through CopySwitches as PromQLSource reads
    rates = _arrival_rates(
        [
            (0.0, [("a", 100000), ("b", 99990)]),
            (5.0, [("a", 100010), ("b", 100000)]),
            (10.0, [("b", 100005)]),  # a rolled: only b, scraped a few seconds earlier than a's last
            (15.0, [("a", 100030), ("b", 100020)]),
        ]
    )
    assert all(r is None or r < 10 for r in rates), rates  # 2 req/s throughout


def test_the_copy_read_stays_while_it_answers() -> None:
    # a, then only b (a rolled), then both again: b is kept (sticky), so no second switch
    rates = _arrival_rates(
        [
            (0.0, [("a", 1000), ("b", 990)]),
            (5.0, [("b", 1000)]),
            (10.0, [("a", 1020), ("b", 1010)]),
            (15.0, [("a", 1030), ("b", 1020)]),
        ]
    )
    assert rates[-1] == pytest.approx(20 / 15), rates  # 1000 (a) .. 1000 (b, held flat) .. 1020 (b): 20 in 15 s


def test_a_restart_on_the_same_copy_is_still_a_restart() -> None:
    # a switch to b (behind: evened out), then b's replica restarts (counter to ~0): read as a restart, as before
    rates = _arrival_rates(
        [(0.0, [("a", 100000), ("b", 99990)]), (5.0, [("b", 100000)]), (10.0, [("b", 100010)]), (15.0, [("b", 4)])]
    )
    # 100000 (a) -> 100000 (b, +0) -> 100010 (+10) -> restart: +4, over 15 s; not +100014 nor the offset
    assert rates[-1] == pytest.approx(14 / 15), rates


def test_a_restart_without_copies_is_a_restart() -> None:
    rates = _arrival_rates([(0.0, [("", 100)]), (5.0, [("", 110)]), (10.0, [("", 3)])])
    assert rates[-1] == pytest.approx(13 / 10), rates


def test_a_histogram_behind_at_a_switch_is_no_restart() -> None:
    values: dict[str, Any] = {}
    h = Histogram((0.1, 1.0, float("inf")), (50.0, 90.0, 100.0), 40.0, 100.0)
    behind = Histogram((0.1, 1.0, float("inf")), (49.0, 88.0, 97.0), 39.0, 97.0)
    again = Histogram((0.1, 1.0, float("inf")), (51.0, 92.0, 102.0), 41.0, 102.0)
    assert even_histogram(values, "ttft", h, False) is h
    assert even_histogram(values, "ttft", behind, True) == h  # the switch: held where it was
    assert even_histogram(values, "ttft", again, False).count == 105.0  # b's +5 since
    restarted = Histogram((0.1, 1.0, float("inf")), (1.0, 1.0, 2.0), 0.5, 2.0)
    assert even_histogram(values, "ttft", restarted, False) == restarted  # b restarted: as read


async def test_the_promql_source_reads_a_switch_of_copy_as_no_restart() -> None:
    # the same ticks through PromQLSource (replicas mode, a thread reader), as kvpilot run reads them
    ticks = [
        (1000.0, [("a", 100000.0), ("b", 99990.0)]),
        (1005.0, [("a", 100010.0), ("b", 100000.0)]),
        (1010.0, [("b", 100005.0)]),
        (1015.0, [("a", 100030.0), ("b", 100020.0)]),
    ]
    clock = VirtualClock(ticks[0][0])
    metadata = {name: [{"type": kind}] for name, kind in META.items()}
    answer_at: dict[float, bytes] = {t: _answer(t, copies) for t, copies in ticks}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/metadata":
            return httpx.Response(200, json={"status": "success", "data": metadata})
        return httpx.Response(200, content=answer_at[clock.now()])

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    source = PromQLSource("http://prometheus:9090", reader="thread", clock=clock, client=client, jobs=["vllm"])
    state, finished, rates = FleetState(rate_window_s=60.0), [], []
    for t, _ in ticks:
        clock.set(t)
        result = await source.collect_once()
        finished += [p.requests_finished for p in result.replicas]
        state.observe(result.replicas, [], now=t)
        rates.append(state.deployments()["llm/chat"].arrival_rate)
    await client.aclose()
    assert finished == [100000.0, 100010.0, 100010.0, 100025.0], finished  # b held at a's last, then b's +5 and +15
    assert rates[1:] == [2.0, pytest.approx(1.0), pytest.approx(25 / 15)], rates
