"""GPUs on nodes: placement of replicas, and utilisation, memory, power, temperature and XID state."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from simulator.profile import GpuModel
from simulator.snapshot import GpuSnapshot

# XIDs whose real effect is a GPU that stops answering (79: fallen off the bus) or a wedged context.
VANISHING_XIDS = frozenset({79})
HANGING_XIDS = frozenset({79, 119, 120})
_TEMP_TAU_S = 60.0
_UTIL_TAU_S = 5.0


@dataclass
class Gpu:
    node: str
    index: int
    model: GpuModel
    pod: str = ""
    utilisation: float = 0.0
    memory_used: int = 0
    energy_j: float = 0.0
    temperature_c: float = 0.0
    last_xid: int = 0
    vanished: bool = False
    hung: bool = False

    def __post_init__(self) -> None:
        self.temperature_c = self.model.idle_temp_c
        digest = hashlib.sha1(f"{self.node}/{self.index}".encode()).hexdigest()
        self.uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        self.pci_bus_id = f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"

    @property
    def power_w(self) -> float:
        m = self.model
        return m.idle_power_w + (m.max_power_w - m.idle_power_w) * self.utilisation

    def advance(self, dt: float, busy_fraction: float) -> None:
        """First-order lags: utilisation over a few seconds (as DCGM samples it), temperature over a minute."""
        if dt <= 0:
            return
        target = 1.0 if self.hung else min(max(busy_fraction, 0.0), 1.0)
        self.utilisation += (target - self.utilisation) * (1 - math.exp(-dt / _UTIL_TAU_S))
        m = self.model
        t_target = m.idle_temp_c + (m.max_temp_c - m.idle_temp_c) * self.utilisation
        self.temperature_c += (t_target - self.temperature_c) * (1 - math.exp(-dt / _TEMP_TAU_S))
        self.energy_j += self.power_w * dt

    def snapshot(self) -> GpuSnapshot:
        return GpuSnapshot(
            node=self.node,
            index=self.index,
            uuid=self.uuid,
            pci_bus_id=self.pci_bus_id,
            model_name=self.model.name,
            pod=self.pod,
            utilisation=self.utilisation,
            memory_used_bytes=self.memory_used,
            memory_total_bytes=self.model.memory_bytes,
            power_w=self.power_w,
            energy_j=self.energy_j,
            temperature_c=self.temperature_c,
            sm_clock_mhz=1980 if self.utilisation > 0.05 else 345,
            last_xid=self.last_xid,
            vanished=self.vanished,
        )


class Nodes:
    """Nodes of `gpus_per_node` GPUs; replicas take consecutive free GPUs on the first node that fits."""

    def __init__(self, model: GpuModel, gpus_per_node: int = 8, *, prefix: str = "node-") -> None:
        if gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
        self.prefix = prefix  # a disaggregated deployment's pools sit on nodes of their own (simulator.disagg)
        self.model = model
        self.gpus_per_node = gpus_per_node
        self.nodes: dict[str, list[Gpu]] = {}

    def place(self, pod: str, count: int) -> list[Gpu]:
        """Free healthy GPUs only. The NVIDIA device plugin marks a GPU Unhealthy on a critical XID (all but the
        application XIDs 13, 31, 43, 45, 68, 109: NVIDIA/k8s-device-plugin, internal/rm/health.go, commit
        02597b97a66aee924ae59788e8de24955d07f2d0), so the scheduler never hands it to a new pod; a GPU hung
        without an XID is kept out the same way here, standing in for the cordon the stuck_gpu finding asks for."""
        if count > self.gpus_per_node:
            raise ValueError(f"a replica of {count} GPUs does not fit on nodes of {self.gpus_per_node}")
        for gpus in self.nodes.values():
            free = [g for g in gpus if not g.pod and not g.hung and not g.vanished]
            if len(free) >= count:
                for g in free[:count]:
                    g.pod = pod
                return free[:count]
        name = f"{self.prefix}{len(self.nodes)}"
        gpus = [Gpu(name, i, self.model) for i in range(self.gpus_per_node)]
        self.nodes[name] = gpus
        for g in gpus[:count]:
            g.pod = pod
        return gpus[:count]

    def release(self, gpus: list[Gpu]) -> None:
        for g in gpus:
            g.pod = ""
            g.memory_used = 0

    def find(self, node: str, index: int) -> Gpu:
        gpus = self.nodes.get(node)
        if gpus is None or not 0 <= index < len(gpus):
            raise KeyError(f"no GPU {index} on node {node!r} (nodes: {', '.join(self.nodes) or 'none'})")
        return gpus[index]

    def all(self) -> list[Gpu]:
        return [g for gpus in self.nodes.values() for g in gpus]
