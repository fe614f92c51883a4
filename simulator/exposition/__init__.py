"""Render snapshots as the /metrics pages of real engines and of dcgm-exporter, with prometheus_client.

One module per format, each exposing `families(replica, engine_index) -> list[Metric]`, registered in ENGINES.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from simulator.exposition import dcgm, llamacpp, sglang, tgi, trtllm, vllm
from simulator.snapshot import GpuSnapshot, ReplicaSnapshot

ENGINES: dict[str, Callable[[ReplicaSnapshot], list[Metric]]] = {
    "vllm": vllm.families,
    "sglang": sglang.families,
    "tgi": tgi.families,
    "trtllm": trtllm.families,
    "llamacpp": llamacpp.families,
}


class _Static(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def _render(metrics: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static(metrics))
    return generate_latest(registry)


def render_replica(replica: ReplicaSnapshot, engine: str) -> bytes:
    try:
        fn = ENGINES[engine]
    except KeyError:
        raise ValueError(f"unknown engine format {engine!r} (known: {', '.join(ENGINES)})") from None
    return _render(fn(replica))


def render_node(node: str, gpus: list[GpuSnapshot], namespace: str) -> bytes:
    return _render(dcgm.families(node, [g for g in gpus if g.node == node and not g.vanished], namespace))
