"""What a fleet looks like at one instant: the values an engine's and an exporter's /metrics would show."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.histogram import Histogram


@dataclass(frozen=True)
class ReplicaSnapshot:
    name: str
    node: str
    state: str  # "loading" | "ready" | "draining" | "hung"
    model_name: str
    requests_waiting: int
    requests_running: int
    kv_usage: float
    kv_capacity_tokens: int
    num_gpu_blocks: int
    block_size: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_queries_total: int
    prefix_hits_total: int
    preemptions_total: int
    requests_finished_total: int
    requests_aborted_total: int
    started_s: float
    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    queue_time: Histogram
    prefill_time: Histogram
    decode_time: Histogram
    inference_time: Histogram
    prompt_len: Histogram
    output_len: Histogram
    gpu_uuids: tuple[str, ...] = ()

    @property
    def ttft_bucket_counts(self) -> list[int]:
        """Cumulative TTFT bucket counts, bounds in `ttft.bounds` then +Inf."""
        return self.ttft.cumulative()


@dataclass(frozen=True)
class GpuSnapshot:
    node: str
    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    pod: str  # the replica it serves, "" when free
    utilisation: float  # 0..1
    memory_used_bytes: int
    memory_total_bytes: int
    power_w: float
    energy_j: float
    temperature_c: float
    sm_clock_mhz: int
    last_xid: int  # 0 = none
    vanished: bool = False

    @property
    def memory_free_bytes(self) -> int:
        return self.memory_total_bytes - self.memory_used_bytes


@dataclass(frozen=True)
class FleetSnapshot:
    time: float
    arrivals_total: int
    unrouted_waiting: int
    routing: str
    replicas: list[ReplicaSnapshot]
    gpus: list[GpuSnapshot]

    def ready_replicas(self) -> int:
        return sum(1 for r in self.replicas if r.state == "ready")
