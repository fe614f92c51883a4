"""Hostile answers to the gateway's arrivals query (``collector.arrivals``): a counter that jumps by 1e18, the copy of
an HA pair switched to while it is behind, duplicate series of one deployment, 50,000 series, values that are no
count, and whole answers that are no Prometheus vector (another shape, an HTML page, a 5xx, one past the timeout).
Each is a counted error of the loop's arrivals stage, or read as docs/scaling.md ("Arrivals from a gateway") says; the
rest of the tick is decided and stored as ever."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from kvpilot.runtime.arrivals import GatewayArrivals, LabelMapping
from kvpilot.runtime.wiring import build_arrivals
from kvpilot.settings import load_settings
from tests.helpers.json_server import JsonServer
from tests.unit.kvpilot.fleet_double import START, ScriptedFleet, make_service, run_ticks
from tests.unit.kvpilot.runtime.test_loop_scale import KEY, FakeScale

MODEL = "llama"
MAPPING = LabelMapping(deployment_label="model_name", deployments={MODEL: KEY})


def _series(value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": "inference_objective_request_total", **labels}, "value": [0, str(value)]}


class _Answers:
    """The query's answers in turn (the last one again once they run out)."""

    def __init__(self, answers: list[list[dict[str, Any]]]) -> None:
        self.answers = answers

    async def __call__(self, query: str, now: float) -> list[dict[str, Any]]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def _rates(gateway: GatewayArrivals, ticks: range) -> list[float | None]:
    return [(await gateway.read(1e9 + t, float(t))).rates.get(KEY) for t in ticks]


async def test_a_counter_jumping_by_1e18_is_not_read_as_requests(caplog: pytest.LogCaptureFixture) -> None:
    """10 requests/s; at 60 s the counter jumps by 1e18 and counts on from there. Read as requests, the jump was a
    rate of 1.7e16 requests/s for a minute (the planner's most replicas); it is said once and read as no step."""
    ticks = range(0, 185, 5)
    values = [10 * t + (1e18 if t >= 60 else 0) for t in ticks]
    gateway = GatewayArrivals(_Answers([[_series(v, model_name=MODEL)] for v in values]), "q", MAPPING, window_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        rates = await _rates(gateway, ticks)
    # 1e18 + 10 t: float64 spaces its values 128 apart there, so each step reads 0 or 128; the window evens them out
    assert all(r is None or r < 20.0 for r in rates), rates
    totals = (await gateway.read(1e9 + 185, 185.0)).totals[KEY]
    assert totals < 10 * 185 * 1.5  # no 1e18 handed to the burst floor
    said = [r.getMessage() for r in caplog.records if "jumped by more than" in r.getMessage()]
    assert len(said) == 1, said
    assert 'model_name="llama"' in said[0]


async def test_the_copy_switched_to_while_behind_is_no_restart() -> None:
    """An HA pair of Prometheus servers: copy "a" is read, then stops answering; copy "b" scraped 10 s earlier is 100
    requests behind. Read as a restart (as before), b's whole count, 100,000 requests, was a burst of 1,667
    requests/s over the window; evened as Thanos evens a switch of copy, the rate stays 10."""
    answers = []
    for t in range(0, 125, 5):
        a = _series(100_000 + 10 * t, model_name=MODEL, prometheus_replica="a")
        b = _series(100_000 + 10 * t - 100, model_name=MODEL, prometheus_replica="b")
        answers.append([a, b] if t < 60 else [b])  # a's server goes away at 60 s
    gateway = GatewayArrivals(_Answers(answers), "q", MAPPING, window_s=60.0, replica_labels=("prometheus_replica",))
    rates = await _rates(gateway, range(0, 125, 5))
    assert [r for r in rates if r is not None] == [pytest.approx(10.0, abs=2.0)] * sum(r is not None for r in rates)
    assert rates[-1] == pytest.approx(10.0)  # a window that began after the switch: exactly the rate


async def test_a_copy_back_after_a_switch_is_not_read_again_while_the_other_answers() -> None:
    """Copy "a" away for a tick and back: the copy read last ("b", after the switch) stays read; switching back and
    forth between copies a few seconds apart would read each switch's difference."""
    answers = []
    for t in range(0, 125, 5):
        a = _series(100_000 + 10 * t, model_name=MODEL, prometheus_replica="a")
        b = _series(100_000 + 10 * t - 100, model_name=MODEL, prometheus_replica="b")
        answers.append([b] if t == 60 else [a, b])
    gateway = GatewayArrivals(_Answers(answers), "q", MAPPING, window_s=60.0, replica_labels=("prometheus_replica",))
    rates = await _rates(gateway, range(0, 125, 5))
    assert rates[-1] == pytest.approx(10.0)
    assert max(r for r in rates if r is not None) < 12.0


async def test_series_of_one_deployment_are_summed_and_a_series_twice_read_once() -> None:
    """Two gateway pods counting one model's requests (7 and 3 a second): summed, as `sum by (model_name)` reads them
    (each is a counter of its own, its resets taken out before the sum). The same series twice in one answer (no
    Prometheus sends that; a proxy merging answers might): read once."""
    answers = []
    for t in range(0, 65, 5):
        one, two = _series(7 * t, model_name=MODEL, pod="epp-0"), _series(3 * t, model_name=MODEL, pod="epp-1")
        answers.append([one, two, dict(one)])
    gateway = GatewayArrivals(_Answers(answers), "q", MAPPING, window_s=60.0)
    rates = await _rates(gateway, range(0, 65, 5))
    assert rates[-1] == pytest.approx(10.0)


@dataclass(frozen=True, slots=True)
class _Where(LabelMapping):
    """``LabelMapping`` that notes the threads it maps series on."""

    threads: set[str] | None = None

    def key(self, labels: Mapping[str, str]) -> str | None:
        assert self.threads is not None
        self.threads.add(threading.current_thread().name)
        return LabelMapping.key(self, labels)


async def test_fifty_thousand_series_are_said_in_a_few_lines_and_read_off_the_event_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """50,000 series a read: 20,000 the mapping does not list, 20,000 NaN, 10,000 counting one deployment. Each kind of
    series left out is said once with how many (it was one line a series, and again every 256 kinds: 40,000 lines a
    read); the answer is mapped in a worker thread, not on the event loop that serves KEDA and /metrics."""
    threads: set[str] = set()
    mapping = _Where(deployment_label="model_name", deployments={MODEL: KEY}, threads=threads)

    def answer(t: int) -> list[dict[str, Any]]:
        unlisted = [_series(t, model_name=f"m{i}") for i in range(20_000)]
        nan = [_series("NaN", model_name=MODEL, pod=f"nan-{i}") for i in range(20_000)]
        counted = [_series(t, model_name=MODEL, pod=f"epp-{i}") for i in range(10_000)]
        return [*unlisted, *nan, *counted]

    async def query(text: str, now: float) -> list[dict[str, Any]]:
        return answer(int(now - 1e9))

    gateway = GatewayArrivals(query, "q", mapping, window_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        rates = await _rates(gateway, range(0, 35, 5))
    assert rates[-1] == pytest.approx(10_000.0)  # 10,000 series each counting 1 a second
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said[:5]
    assert any("20000 series left out" in m and "is not among" in m for m in said)
    assert any("20000 series left out" in m and "not a count" in m for m in said)
    assert threading.current_thread().name not in threads


# Whole answers that are no Prometheus vector, through the real client `kvpilot run` builds (collector.timeout_s 1 s).
SLOW_S = 4.0


def _good(t: float) -> bytes:
    vector = [{"metric": {"model_name": MODEL}, "value": [t, str(10 * (t - START))]}]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": vector}}).encode()


HOSTILE: dict[str, tuple[int, bytes]] = {
    "matrix": (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
    "scalar": (200, b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}'),
    "html": (200, b"<html><body>Sign in to continue</body></html>"),
    "503": (503, b"<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>"),
    "error": (
        422,
        b'{"status":"error","errorType":"execution","error":"query processing would load too many samples"}',
    ),
    "slow": (200, b""),  # answered after SLOW_S
    "series": (200, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":null,"value":[1,"2"]}]}}'),
}


class _Hostile(JsonServer):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.hostile = False

        def answer(path: str, _body: bytes, _head: Any) -> tuple[int, bytes]:
            if not self.hostile:
                return 200, _good(time.time())
            if self.kind == "slow":
                time.sleep(SLOW_S)
                return 200, _good(time.time())
            return HOSTILE[self.kind]

        super().__init__(answer)


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request: pytest.FixtureRequest) -> Iterator[_Hostile]:
    server = _Hostile(request.param)
    yield server
    server.close()


async def test_an_answer_that_is_no_vector_is_a_counted_error_and_the_tick_goes_on(
    hostile: _Hostile, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"sqlite:///{tmp_path / 'kvpilot.db'}"
    arrivals = {"source": "promql", "promql_url": hostile.url, "query": "x_total", "deployment_label": "model_name"}
    settings = load_settings(collector={"timeout_s": 1, "arrivals": {**arrivals, "deployments": {MODEL: KEY}}})
    gateway = build_arrivals(settings)
    assert gateway is not None
    clock = VirtualClock(START)
    service, restored, timer = make_service(
        db, clock, ScriptedFleet(clock), scale=FakeScale(replicas=1), arrivals=gateway
    )
    await service.start(restored)
    try:
        await run_ticks(service, timer, 2)
        hostile.hostile = True
        ticks = service.loop.tick_count
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="kvpilot.runtime.loop"):
            await run_ticks(service, timer, 2)
        took = time.monotonic() - started
        errors = service.loop.metrics.stage_errors.labels("arrivals")._value.get()  # type: ignore[attr-defined]
        assert errors == 2
        assert service.loop.tick_count == ticks + 2
        snapshot = service.snapshot()
        assert snapshot is not None
        assert KEY in snapshot.decisions  # decided (on the engines' estimate) and published
        said = [r.getMessage() for r in caplog.records if "gateway's request counter failed" in r.getMessage()]
        assert len(said) == 2, said
        assert all(r.exc_info is None for r in caplog.records)  # one line each, no traceback
        assert hostile.url in said[0]
        assert took < 2 * SLOW_S  # a hang guard: the slow answer is given up at collector.timeout_s, each tick
    finally:
        service.stop.set()
        await service.wait()
        await gateway.aclose()


@pytest.mark.parametrize("bad", ["+Inf", "-Inf", "-5", "NaN", "1e400", "twelve"])
async def test_a_value_that_is_no_count_leaves_its_series_out_and_the_others_read(
    bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One gateway pod's counter answers a value that is no count (Prometheus writes NaN and +-Inf; a negative or
    unreadable one comes from a broken exporter or a proxy): that series is left out, said once with how many, and
    the deployment's other series are read as ever."""
    answers = []
    for t in range(0, 65, 5):
        good = _series(10 * t, model_name=MODEL, pod="epp-0")
        answers.append([good, *(_series(bad, model_name=MODEL, pod=f"epp-{i}") for i in (1, 2))])
    gateway = GatewayArrivals(_Answers(answers), "q", MAPPING, window_s=60.0)
    with caplog.at_level(logging.WARNING, logger="kvpilot.runtime.arrivals"):
        rates = await _rates(gateway, range(0, 65, 5))
    assert rates[-1] == pytest.approx(10.0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "2 series left out" in said[0]
    assert "not a count" in said[0]
