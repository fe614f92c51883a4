"""What a pod asks the scheduler for, read by Kubernetes discovery for cost (docs/cost.md): the GPU product it selects
nodes by and the GPUs its containers' limits add up to; then priced ahead of the GPU exporter, behind settings."""

from __future__ import annotations

from typing import Any

import pytest

from collector.discovery.kubernetes import pod_target
from collector.samples import TargetInfo
from scaler.cost import DEFAULT_GPU_PRICES, CostConfig, GpuAssignment, deployment_cost, discovered_gpus
from tests.unit.collector.test_discovery_kubernetes import as_pod, pod_dict
from tests.unit.scaler.test_cost import _view


def _pod(*, selector: dict[str, str] | None = None, affinity: Any = None, limits: list[dict[str, Any]]) -> Any:
    d = pod_dict(ports=[8000])
    d["spec"]["containers"] = [
        {"name": f"c{i}", "image": "vllm", "ports": [{"containerPort": 8000}], "resources": {"limits": lim}}
        for i, lim in enumerate(limits)
    ]
    if selector is not None:
        d["spec"]["nodeSelector"] = selector
    if affinity is not None:
        d["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    return as_pod(d)


def _term(*values: str) -> dict[str, Any]:
    expr = {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(values)}
    return {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}


CASES = [
    # the node selector names the product; two containers' limits add up
    (dict(selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, limits=[{"nvidia.com/gpu": "2"},
                                                                                {"nvidia.com/gpu": "2"}]),
     ("NVIDIA-H100-80GB-HBM3", 4)),
    # a required node-affinity term naming exactly one product
    (dict(affinity=_term("NVIDIA-H200"), limits=[{"nvidia.com/gpu": "1"}]), ("NVIDIA-H200", 1)),
    # a term allowing two products says no one type
    (dict(affinity=_term("NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"), limits=[{"nvidia.com/gpu": "1"}]), ("", 1)),
    # nothing asked: ("", 0); a CPU limit is not a GPU
    (dict(limits=[{"cpu": "4"}]), ("", 0)),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "want"), CASES)
def test_pod_target_reads_the_gpus_a_pod_asks_for(pod: dict[str, Any], want: tuple[str, int]) -> None:
    target = pod_target(_pod(**pod))
    assert target is not None
    assert (target.gpu_product, target.gpus) == want


def test_discovered_gpus_per_deployment_and_their_precedence() -> None:
    targets = [
        TargetInfo(url=f"http://10.0.0.{i}:8000/metrics", namespace="llm", deployment="chat", pod=f"chat-{i}",
                   gpu_product="NVIDIA-A100-SXM4-80GB", gpus=2)
        for i in range(3)
    ]  # fmt: skip
    targets.append(TargetInfo(url="http://10.0.1.1:9400/metrics", kind="gpu", gpu_product="NVIDIA-H100-80GB-HBM3"))
    asked = discovered_gpus(targets, DEFAULT_GPU_PRICES)
    assert asked == {"llm/chat": GpuAssignment("A100", 2)}  # GPU exporter targets are not engines
    view = _view(gpus_per_replica=1)  # the exporter sees one H100 per replica
    cost = deployment_cost(view, CostConfig(), discovered=asked["llm/chat"])
    assert (cost.gpu_type, cost.gpu_type_source, cost.gpus_per_replica, cost.gpus_per_replica_source) == (
        "A100", "pod spec", 2, "pod spec"
    )  # fmt: skip
    # settings still win over the pod spec
    ruled = deployment_cost(view, CostConfig(default=GpuAssignment("L4")), discovered=asked["llm/chat"])
    assert (ruled.gpu_type, ruled.gpu_type_source, ruled.gpus_per_replica) == ("L4", "settings", 2)
