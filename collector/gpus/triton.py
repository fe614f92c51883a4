"""Triton's own GPU series (``nv_gpu_*``, labelled by ``gpu_uuid``) -> ``GpuSample``s (pure).

Triton pages carry these beside the TensorRT-LLM engine series, so a Triton target yields replicas and
GPUs from one scrape. Triton names GPUs only by UUID, so the UUID is also the ``index``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from collector.exposition import MetricFamily
from collector.samples import GpuSample, TargetInfo

_UTIL = "nv_gpu_utilization"  # 0..1
_USED = "nv_gpu_memory_used_bytes"
_TOTAL = "nv_gpu_memory_total_bytes"
_POWER = "nv_gpu_power_usage"  # W

FAMILIES: frozenset[str] = frozenset({_UTIL, _USED, _TOTAL, _POWER})


def _by_uuid(families: Mapping[str, MetricFamily], name: str) -> dict[str, float]:
    fam = families.get(name)
    out: dict[str, float] = {}
    for s in fam.samples if fam is not None else ():
        uuid = s.labels.get("gpu_uuid")
        if uuid and math.isfinite(s.value):
            out[uuid] = s.value
    return out


def adapt_triton_gpus(families: Mapping[str, MetricFamily], target: TargetInfo, timestamp: float) -> list[GpuSample]:
    util, used, total, power = (_by_uuid(families, n) for n in (_UTIL, _USED, _TOTAL, _POWER))
    uuids = list(dict.fromkeys([*util, *used, *total, *power]))
    out = []
    for uuid in uuids:
        free = total[uuid] - used[uuid] if uuid in total and uuid in used else None
        out.append(
            GpuSample(
                node=target.node,
                index=uuid,
                uuid=uuid,
                model_name=None,
                timestamp=timestamp,
                pod=target.pod or None,
                namespace=target.namespace if target.pod else None,
                utilisation=util.get(uuid),
                memory_used_bytes=used.get(uuid),
                memory_free_bytes=free,
                power_w=power.get(uuid),
            )
        )
    return out
