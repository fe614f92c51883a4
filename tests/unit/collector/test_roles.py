"""Roles of a disaggregated deployment: from pod labels, a static field and the engine's page, kept apart as pools."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collector.adapt import adapt_page
from collector.discovery.kubernetes import pod_target
from collector.discovery.static import TargetFileError, parse_targets
from collector.roles import pool_key, role_from_pod, split_pool_key
from collector.samples import ReplicaSample, TargetInfo
from collector.state import FleetState
from tests.unit.collector.test_discovery_kubernetes import as_pod, pod_dict

POD_ROLES = [
    # llm-d's label, all three values
    ({"llm-d.ai/role": "prefill"}, {}, "prefill"),
    ({"llm-d.ai/role": "decode"}, {}, "decode"),
    ({"llm-d.ai/role": "both"}, {}, "both"),
    # Dynamo's operator labels: the sub-component type, else the component's name
    ({"nvidia.com/dynamo-sub-component-type": "prefill"}, {}, "prefill"),
    ({"nvidia.com/dynamo-component": "VllmDecodeWorker"}, {}, "decode"),
    ({"nvidia.com/dynamo-component": "VllmPrefillWorker"}, {}, "prefill"),
    # a component name that says nothing about the phase: no role (the pool "both")
    ({"nvidia.com/dynamo-component": "Frontend"}, {}, None),
    # kvpilot's annotation wins over the labels, and is read case-insensitively
    ({"llm-d.ai/role": "decode"}, {"kvpilot.io/role": " Prefill "}, "prefill"),
    # no label at all
    ({}, {}, None),
]


@pytest.mark.parametrize(("labels", "annotations", "expected"), POD_ROLES)
def test_role_from_pod(labels: dict[str, str], annotations: dict[str, str], expected: str | None) -> None:
    assert role_from_pod(labels, annotations) == expected


def test_pod_target_carries_the_role_and_refuses_one_it_cannot_read() -> None:
    target = pod_target(as_pod(pod_dict(labels={"llm-d.ai/role": "prefill"}, ports=[8000])))
    assert target is not None
    assert (target.role, target.deployment_key) == ("prefill", "prod/llama@prefill")
    # a misspelt role would put the pod in a pool of its own: not scraped, and logged
    assert pod_target(as_pod(pod_dict(labels={"llm-d.ai/role": "prefil"}, ports=[8000]))) is None


def test_static_file_role_field() -> None:
    targets = parse_targets(
        {
            "defaults": {"deployment": "llama", "role": "decode"},
            "targets": [{"url": "http://a:8000/metrics", "role": "PREFILL"}, {"url": "http://b:8000/metrics"}],
        }
    )
    assert [t.role for t in targets] == ["prefill", "decode"]
    with pytest.raises(TargetFileError, match=r"target 0: role: must be one of prefill, decode, both, got 'encode'"):
        parse_targets([{"url": "http://a:8000/metrics", "role": "encode"}])


DYNAMO_WORKER = (
    'dynamo_component_requests_total{dynamo_component="prefill"} 9\n'
    'dynamo_component_gpu_cache_usage_percent{dynamo_component="prefill"} 0.3\n'
    'vllm:num_requests_waiting{model_name="m"} 4\n'
)


@pytest.mark.parametrize(
    ("text", "role", "expected"),
    [
        # a Dynamo worker's page names its component: read by vLLM's adapter, the role from Dynamo's labels
        (DYNAMO_WORKER, None, "prefill"),
        # the same page without vLLM's series (Dynamo's adapter)
        (DYNAMO_WORKER.rsplit("vllm:", 1)[0], None, "prefill"),
        # discovery's role wins over the page's
        (DYNAMO_WORKER, "decode", "decode"),
        # a plain vLLM page tells nothing
        ('vllm:num_requests_waiting{model_name="m"} 4\n', None, None),
    ],
)
def test_role_from_the_engines_page(text: str, role: str | None, expected: str | None) -> None:
    target = TargetInfo(url="http://x/metrics", pod="p", deployment="llama", namespace="prod", role=role)
    (sample,) = adapt_page(text, target, 0.0).replicas
    assert sample.role == expected


def _sample(replica: str, role: str | None, t: float, **values: object) -> ReplicaSample:
    base = ReplicaSample(
        namespace="prod", deployment="llama", replica=replica, node="n0", engine="vllm", model="m", timestamp=t
    )
    return replace(base, role=role, **values)  # type: ignore[arg-type]


def test_fleet_state_keeps_pools_apart() -> None:
    state = FleetState()
    for t in (0.0, 5.0):
        state.observe(
            [
                _sample("p0", "prefill", t, requests_waiting=7.0, kv_usage=0.1),
                _sample("p1", "prefill", t, requests_waiting=3.0, kv_usage=0.1),
                _sample("d0", "decode", t, requests_running=40.0, kv_usage=0.9),
                _sample("c0", None, t, requests_running=2.0, kv_usage=0.2),
            ],
            [],
            now=t,
        )
    views = state.deployments()
    assert sorted(views) == ["prod/llama", "prod/llama@decode", "prod/llama@prefill"]
    prefill, decode, both = views["prod/llama@prefill"], views["prod/llama@decode"], views["prod/llama"]
    assert (prefill.name, prefill.pool, prefill.ready_replicas, prefill.requests_waiting) == ("llama", "prefill", 2, 10)
    assert (decode.pool, decode.requests_running, decode.kv_usage_max) == ("decode", 40.0, 0.9)
    # the co-located replica keeps the deployment's own key; the decode pool's KV is not mixed in
    assert (both.pool, both.ready_replicas, both.kv_usage_max) == ("both", 1, 0.2)
    assert [p.ready_replicas for p in state.deployment_history("prod/llama@prefill")] == [2, 2]


def test_pool_keys_round_trip() -> None:
    for deployment, pool in (("prod/llama", "prefill"), ("prod/llama", "decode"), ("prod/llama", "both")):
        assert split_pool_key(pool_key(deployment, pool)) == (deployment, pool)
    assert pool_key("prod/llama", "both") == "prod/llama"  # a co-located deployment keeps its key
    assert split_pool_key("prod/llama@v2") == ("prod/llama@v2", "both")  # only known pools split
