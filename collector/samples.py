"""Canonical, engine-neutral samples: what every adapter produces and everything downstream consumes.

A value an engine or exporter does not export is ``None``, never 0: "unknown" and "zero" lead to
opposite decisions (a replica with unknown KV usage must not look idle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from collector.frozen import fast_init
from collector.roles import BOTH, POOL_SEPARATOR, pool_key, pool_of


@fast_init
@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram as scraped: ``bounds`` are the ``le`` upper bounds (last is +Inf)."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]  # cumulative, same length as bounds
    sum: float
    count: float

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.counts):
            raise ValueError(f"histogram has {len(self.bounds)} bounds but {len(self.counts)} counts")
        if self.bounds and not math.isinf(self.bounds[-1]):
            raise ValueError("histogram must end with an +Inf bucket")


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """Who a scraped page belongs to. Discovery fills it; adapters copy it onto their samples."""

    url: str
    kind: str = "engine"  # "engine" or "gpu"
    engine: str | None = None  # None: auto-detect from the families present
    namespace: str = "default"
    deployment: str = ""
    pod: str = ""
    node: str = ""
    # Text a serving stack puts before the engine's metric names (Ray Serve LLM: "ray_"); None: found on the page.
    prefix: str | None = None
    role: str | None = None  # "prefill", "decode" or "both" (collector.roles); None: from the page, else both
    # What the pod asks the scheduler for (Kubernetes discovery; scaler.cost prices it): the GPU product it selects
    # nodes by (`nvidia.com/gpu.product`, e.g. "NVIDIA-H100-80GB-HBM3") and the `nvidia.com/gpu` its containers'
    # limits add up to. ""/0: not said.
    gpu_product: str = ""
    gpus: int = 0

    @property
    def deployment_key(self) -> str:
        """The key of the deployment's pool this target serves (``collector.roles.pool_key``)."""
        return pool_key(f"{self.namespace}/{self.deployment}", pool_of(self.role))


@fast_init
@dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One engine replica (pod) at one scrape."""

    namespace: str
    deployment: str
    replica: str
    node: str
    engine: str
    model: str | None
    timestamp: float
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_usage: float | None = None  # 0..1
    kv_capacity_tokens: float | None = None  # blocks x block size, where known
    # counters (monotonic between restarts; FleetState turns them into rates)
    prefix_queries: float | None = None  # tokens
    prefix_hits: float | None = None  # tokens
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests_finished: float | None = None
    # latency histograms, seconds
    ttft: Histogram | None = None
    itl: Histogram | None = None
    e2e: Histogram | None = None
    queue_time: Histogram | None = None
    role: str | None = None  # "prefill", "decode" or "both"; None: serves both phases (collector.roles)

    @property
    def pool(self) -> str:
        return pool_of(self.role)

    @property
    def deployment_key(self) -> str:
        """The key of the pool this replica belongs to: ``namespace/name``, or ``namespace/name@prefill`` (and
        ``@decode``) for a disaggregated deployment's pools (``collector.roles.pool_key``, inlined: a hot path)."""
        role = self.role
        if role is None or role == BOTH:
            return f"{self.namespace}/{self.deployment}"
        return f"{self.namespace}/{self.deployment}{POOL_SEPARATOR}{role}"


@fast_init
@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG instance) at one scrape."""

    node: str
    index: str  # "0", "1", ...; for MIG "0/1" (gpu/instance)
    uuid: str | None
    model_name: str | None
    timestamp: float
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    mig_profile: str | None = None
    mig_instance: str | None = None
    utilisation: float | None = None  # 0..1
    memory_used_bytes: float | None = None
    memory_free_bytes: float | None = None
    sm_active: float | None = None  # 0..1
    temperature_c: float | None = None
    power_w: float | None = None
    last_xid: int | None = None  # last XID seen (dcgm: gauge value); 0 or None: none
    xid_count: float | None = None  # counter, where exported
    ecc_dbe_volatile: float | None = None
    remapped_rows_correctable: float | None = None
    remapped_rows_uncorrectable: float | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replay: float | None = None
    recovery_action: int | None = None  # NVML field 230: 0 none, 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset
    extra: dict[str, float] = field(default_factory=dict)
    # The URL of the page it was read from (its password redacted), where no node is known (``CollectResult.gpus``),
    # else "": a down exporter's ``target_down`` names that page, and a sharded instance closes it by the page's shard.
    page: str = ""

    @property
    def key(self) -> str:
        # MIG instances share their parent's UUID: the instance id keeps their keys apart. A GPU with no UUID is
        # placed by its node, or on no node by its page: GPU "0" of two such pages are two GPUs.
        base = f"{self.node}/{self.uuid}" if self.uuid else f"{self.node or self.page}/{self.index}"
        return f"{base}/mig{self.mig_instance}" if self.mig_instance is not None else base


@dataclass(frozen=True, slots=True)
class GoneGpuSample(GpuSample):
    """A GPU its exporter stopped listing while it still answers, as its last sample read: a source that reads no
    whole page (PromQL ``aggregates`` mode) hands it in the GPUs it read, and ``FleetState`` tracks it as absent
    (``vanished``), as a GPU missing from a page its exporter answered."""

    @classmethod
    def of(cls, sample: GpuSample) -> GoneGpuSample:
        return cls(**{f.name: getattr(sample, f.name) for f in fields(GpuSample)})
