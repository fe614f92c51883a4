"""Dynamo's work-handler series tell an LLM worker only where they serve a model (issue 12, session 29 helper D).

Every component endpoint of Dynamo's DistributedRuntime gets ``dynamo_component_requests_total``,
``request_duration_seconds`` and ``inflight_requests``; the runtime's own system_metrics example serves them for
``example_component`` (pinned: dynamo-runtime-example-component__ai-dynamo__dynamo__system_metrics_README.txt). Such a
page was a `dynamo` replica whose every field but the request count was unknown. A real worker's series carry the
model and the ``generate`` endpoint (dynamo-worker-vllm-eks-h100 in tests/fixtures/metrics).
"""

from __future__ import annotations

import pytest

from collector.adapt import adapt_page
from collector.engines import UnknownEngine
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://10.0.0.1:8081/metrics", pod="pod-0")


def _component(labels: str) -> str:
    return (
        "# TYPE dynamo_component_requests_total counter\n"
        f"dynamo_component_requests_total{{{labels}}} 10\n"
        "# TYPE dynamo_component_inflight_requests gauge\n"
        f"dynamo_component_inflight_requests{{{labels}}} 2\n"
    )


def test_work_handler_series_are_a_worker_only_where_they_serve_a_model() -> None:
    generic = _component('dynamo_component="example_component",dynamo_endpoint="example_endpoint9881"')
    with pytest.raises(UnknownEngine, match="a Dynamo runtime component's generic endpoint series"):
        adapt_page(generic, TARGET, 0.0)
    with pytest.raises(UnknownEngine, match="page has none of the dynamo families"):
        adapt_page(generic, TARGET, 0.0, engine="dynamo")

    for labels in (
        'dynamo_component="backend",dynamo_endpoint="generate"',  # the endpoint LLM workers serve
        'dynamo_component="worker",dynamo_endpoint="serve",model="Qwen/Qwen3-0.6B"',  # a model label
    ):
        (replica,) = adapt_page(_component(labels), TARGET, 0.0).replicas
        assert (replica.engine, replica.requests_finished) == ("dynamo", 10.0), labels
