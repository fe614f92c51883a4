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


# Exporters written in Go or Rust (dcgm-exporter, TGI) declare counters without the `_total` suffix that
# prometheus_client's counter families add. Such families are built as gauges, named here, and their TYPE line
# is rewritten to `counter`, so the page matches the real exporter byte for byte in names and types.
BARE_COUNTERS = frozenset(
    {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "tgi_request_count",
        "tgi_request_success",
        "tgi_request_failure",
    }
)


def _render(metrics: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static(metrics))
    text = generate_latest(registry)
    for m in metrics:
        if m.name in BARE_COUNTERS and m.type == "gauge":
            text = text.replace(f"# TYPE {m.name} gauge\n".encode(), f"# TYPE {m.name} counter\n".encode(), 1)
    return text


def render_replica(replica: ReplicaSnapshot, engine: str) -> bytes:
    try:
        fn = ENGINES[engine]
    except KeyError:
        raise ValueError(f"unknown engine format {engine!r} (known: {', '.join(ENGINES)})") from None
    return _render(fn(replica))


def render_node(node: str, gpus: list[GpuSnapshot], namespace: str) -> bytes:
    return _render(dcgm.families(node, [g for g in gpus if g.node == node and not g.vanished], namespace))
