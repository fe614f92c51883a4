"""Any JSON a Prometheus-compatible URL answers with: the PromQL source reads it or raises PromQLError, nothing else
(a TypeError or KeyError deep in the reading would be a traceback every tick). Hypothesis over near-Prometheus
answers (vectors with odd labels, values, warnings, isPartial) and arbitrary JSON. A guard (session 25, E): it passes
on 27c5343 too (1,000 examples there as a probe, 300 here; 100 a run, about 9 s)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource
from tests.helpers.json_server import JsonServer

NOW = 1_700_000_600.0
METADATA = json.dumps(
    {
        "status": "success",
        "data": {
            "vllm:num_requests_running": [{"type": "gauge", "help": "", "unit": ""}],
            "DCGM_FI_DEV_XID_ERRORS": [{"type": "gauge", "help": "", "unit": ""}],
        },
    }
).encode()

SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
ANY_JSON = st.recursive(
    SCALAR, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=20
)
NAMES = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "up",
        "DCGM_FI_DEV_XID_ERRORS",
        "vllm:request_success_total",
    ]
)
LABEL = st.text(max_size=12) | st.sampled_from(["ns", "p0", "j", "10.0.0.1:8000", "GPU-1", "0"])
METRIC = (
    st.fixed_dictionaries(
        {"__name__": NAMES},
        optional={k: LABEL for k in ("namespace", "pod", "job", "instance", "node", "gpu", "UUID", "model_name", "le")},
    )
    | ANY_JSON
)
VALUE = (
    st.tuples(
        st.floats() | st.integers() | st.text(max_size=5) | st.just(NOW),
        st.sampled_from(["1", "NaN", "+Inf", "-Inf", "1e999", "", "0x1", "-1", "1e-320"])
        | st.text(max_size=6)
        | ANY_JSON,
    ).map(list)
    | ANY_JSON
)
SERIES = st.fixed_dictionaries({"metric": METRIC, "value": VALUE}) | ANY_JSON
VECTOR = st.fixed_dictionaries(
    {
        "status": st.just("success") | ANY_JSON,
        "data": st.fixed_dictionaries(
            {"resultType": st.just("vector") | ANY_JSON, "result": st.lists(SERIES, max_size=6) | ANY_JSON}
        )
        | ANY_JSON,
    },
    optional={"warnings": ANY_JSON, "isPartial": ANY_JSON},
)


class _Answers(JsonServer):
    """Answers /api/v1/metadata with ``METADATA`` and every query with ``body``, 200."""

    def __init__(self) -> None:
        self.body = b"{}"
        super().__init__(
            lambda path, _body, _head: (200, METADATA if path.startswith("/api/v1/metadata") else self.body)
        )


@pytest.fixture(scope="module")
def answers() -> Iterator[_Answers]:
    server = _Answers()
    yield server
    server.close()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.one_of(VECTOR, ANY_JSON))
def test_any_answer_is_read_or_a_promql_error(answers: _Answers, body: Any) -> None:
    answers.body = json.dumps(body).encode()

    async def collect() -> None:
        source = PromQLSource(answers.url, reader="thread", clock=VirtualClock(NOW))
        try:
            await source.collect_once()
        except PromQLError:
            pass  # said in one line by the loop
        finally:
            await source.aclose()

    asyncio.run(collect())
