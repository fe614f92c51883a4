"""A GPU read through Prometheus keeps the pod its exporter attributed it to when that pod is a replica read with it
(so the stuck-GPU detector joins it by pod, as when scraped), and never takes the exporter's own pod for one."""

from __future__ import annotations

import json
from typing import Any

from collector.promql.series import read_answers

_VLLM = {"job": "vllm", "instance": "10.0.0.9:8000", "namespace": "llm", "pod": "llama-0", "deployment": "llama"}
_DCGM = {"job": "dcgm", "instance": "10.0.0.5:9400", "Hostname": "gpu-node-1"}
_DME = {"job": "amd", "instance": "10.0.0.6:5000", "hostname": "gpu-node-2", "gpu_partition_id": "0"}
_TYPES = {"DCGM_FI_DEV_GPU_UTIL": "gauge", "gpu_gfx_activity": "gauge", "vllm:num_requests_running": "gauge"}


def _answer(*series: tuple[str, dict[str, str], float]) -> bytes:
    result: list[dict[str, Any]] = [
        {"metric": {"__name__": name, **labels}, "value": [1.0, str(value)]} for name, labels, value in series
    ]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def _gpus(*series: tuple[str, dict[str, str], float]) -> dict[str, tuple[str | None, str | None, str | None]]:
    answer = _answer(("vllm:num_requests_running", _VLLM, 3), *series)
    results = read_answers([("part", answer)], (), _TYPES, 1.0, frozenset(), 0.0)
    return {f"{g.node}/{g.index}": (g.namespace, g.pod, g.container) for r in results for g in r.gpus}


def test_a_gpu_attributed_to_a_replica_read_with_it_keeps_its_pod_dcgm_and_amd_alike() -> None:
    workload = {"namespace": "llm", "pod": "llama-0", "container": "vllm"}
    gpus = _gpus(
        ("DCGM_FI_DEV_GPU_UTIL", {**_DCGM, "gpu": "0", **workload}, 100),
        ("gpu_gfx_activity", {**_DME, "gpu_id": "0", **workload}, 97),
    )
    assert gpus == {"gpu-node-1/0": ("llm", "llama-0", "vllm"), "gpu-node-2/0": ("llm", "llama-0", "vllm")}


def test_the_exporters_own_pod_or_a_pod_not_read_is_no_attribution() -> None:
    # honor_labels off (or an unallocated GPU): the series carry the exporter pod's target labels; a GPU serving a
    # pod kvpilot does not read this tick is not attributed to it either (as before: joined by node, if alone)
    own = {"namespace": "gpu-operator", "pod": "dcgm-exporter-7x2kq", "container": "exporter"}
    other = {"namespace": "llm", "pod": "llama-1"}
    gpus = _gpus(
        ("DCGM_FI_DEV_GPU_UTIL", {**_DCGM, "gpu": "0", **own}, 100),
        ("gpu_gfx_activity", {**_DME, "gpu_id": "1", **other}, 97),
    )
    assert gpus == {"gpu-node-1/0": (None, None, None), "gpu-node-2/1": (None, None, None)}
