"""A disaggregated deployment's decode pool on each GPU type kvpilot prices (issue 14: H100, H200, A100, L4): the
pool runs its type's calibrated profile, so its GPUs, and the KV pool that limits its admission, are that type's."""

from __future__ import annotations

from simulator.config import FleetConfig
from simulator.disagg import DisaggConfig, DisaggregatedFleet
from simulator.profile import PROFILES
from tests.unit.simulator.test_sim_disagg import _trace

TYPES = ("L4", "A100", "H100", "H200")  # by HBM: 24, 80, 80 and 141 GB


def _decode_on(gpu: str) -> tuple[str, int, int]:
    profile = PROFILES[f"llama3-8b-{gpu.lower()}"]
    trace = _trace(n=8, prompt=500, output=16, every_s=1.0)
    fleet = DisaggregatedFleet(
        DisaggConfig(
            prefill=FleetConfig(profile=PROFILES["llama3-8b-h100"], replicas=1, cold_start_s=0),
            decode=FleetConfig(profile=profile, replicas=1, cold_start_s=0),
        ),
        trace,
    )
    fleet.advance_to(trace.duration_s + 60)
    (replica,) = fleet.snapshots()["decode"].replicas
    (name,) = {g.model_name for g in fleet.snapshots()["decode"].gpus}
    return name, replica.kv_capacity_tokens, len(fleet.finished())


def test_decode_runs_on_each_priced_gpu_type_with_its_own_kv_pool() -> None:
    runs = {gpu: _decode_on(gpu) for gpu in TYPES}
    for gpu, (name, _, finished) in runs.items():
        assert gpu in name, (gpu, name)
        assert finished == 8  # every request handed over and decoded
    kv = [runs[gpu][1] for gpu in TYPES]
    assert kv[0] < kv[1]
    assert kv[2] < kv[3]
