"""Replica profiles: engine limits, KV pool sizing and the step-time model.

Step time of one engine iteration (a Vidur-style linear model, Agrawal et al., MLSys'24):

    t = base_s + prefill_tokens · prefill_s_per_token + decode_seqs · decode_s_per_seq
        + context_tokens · kv_read_s_per_token

The default profile is Llama-3-8B (BF16) on one H100-SXM-80GB. Its constants come from published numbers:
weights 16.1 GB streamed once per step at the H100's 3.35 TB/s (datasheet) at ~70% achieved bandwidth give
base_s ≈ 6.9 ms, in line with the ~7 ms TPOT at low concurrency that vLLM benchmarks report for 8B models on
H100; prefill costs 2·8.0e9 FLOP per token at 989 TFLOPS dense BF16 and ~50% MFU ≈ 32 µs/token; KV reads are
128 KiB per context token per step (32 layers × 8 KV heads × 128 dims × 2 (K,V) × 2 bytes) at the same
bandwidth ≈ 56 ns/token. See docs/simulator.md for the derivation and a 70B/TP-4 profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

GIB = 1024**3


@dataclass(frozen=True)
class GpuModel:
    name: str = "NVIDIA H100 80GB HBM3"
    memory_bytes: int = 80 * GIB
    idle_power_w: float = 70.0
    max_power_w: float = 700.0
    idle_temp_c: float = 33.0
    max_temp_c: float = 78.0


@dataclass(frozen=True)
class ReplicaProfile:
    """What one engine replica is: model, GPUs, engine limits and speed. All sizes in tokens or bytes."""

    model_name: str = "meta-llama/Meta-Llama-3-8B-Instruct"
    gpu: GpuModel = field(default_factory=GpuModel)
    gpus_per_replica: int = 1
    weights_bytes: int = 16_060_000_000
    kv_bytes_per_token: int = 131_072
    gpu_memory_utilization: float = 0.90
    activation_reserve_bytes: int = 4 * GIB
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    enable_prefix_caching: bool = True
    base_s: float = 0.0069
    prefill_s_per_token: float = 3.2e-5
    decode_s_per_seq: float = 2.0e-5
    kv_read_s_per_token: float = 5.6e-8
    warmup_s: float = 30.0
    warmup_slowdown: float = 1.5

    def __post_init__(self) -> None:
        checks = {
            "gpus_per_replica": self.gpus_per_replica >= 1,
            "block_size (must divide 512, the prefix block)": self.block_size >= 1 and 512 % self.block_size == 0,
            "max_num_seqs": self.max_num_seqs >= 1,
            "max_num_batched_tokens": self.max_num_batched_tokens >= self.block_size,
            "gpu_memory_utilization": 0 < self.gpu_memory_utilization <= 1,
            "base_s": self.base_s > 0,
            "step constants": min(self.prefill_s_per_token, self.decode_s_per_seq, self.kv_read_s_per_token) >= 0,
            "warmup_slowdown": self.warmup_slowdown >= 1,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid replica profile {self.model_name!r}: bad {', '.join(bad)}")
        if self.num_gpu_blocks < 1:
            raise ValueError(
                f"invalid replica profile {self.model_name!r}: weights ({self.weights_bytes} B) leave no KV memory "
                f"on {self.gpus_per_replica} × {self.gpu.name}"
            )

    @property
    def num_gpu_blocks(self) -> int:
        """KV blocks = (GPU memory × utilisation − weights − activations) / block bytes, as vLLM sizes its pool."""
        budget = self.gpu.memory_bytes * self.gpus_per_replica * self.gpu_memory_utilization
        free = budget - self.weights_bytes - self.activation_reserve_bytes * self.gpus_per_replica
        return max(0, math.floor(free / (self.kv_bytes_per_token * self.block_size)))

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        return (
            self.base_s
            + prefill_tokens * self.prefill_s_per_token
            + decode_seqs * self.decode_s_per_seq
            + context_tokens * self.kv_read_s_per_token
        )

    def decode_steps_time(self, k: int, decode_seqs: int, context_tokens: int) -> float:
        """Time of k consecutive pure-decode steps: the context grows by `decode_seqs` tokens per step."""
        per_step = self.base_s + decode_seqs * self.decode_s_per_seq + context_tokens * self.kv_read_s_per_token
        growth = decode_seqs * self.kv_read_s_per_token * k * (k - 1) / 2.0
        return k * per_step + growth


LLAMA3_8B_H100 = ReplicaProfile()

# Llama-3-70B BF16 on 4 × H100 (tensor parallel): 141 GB of weights over 4 × 3.35 TB/s at ~65% with TP
# all-reduce overhead; 320 KiB of KV per token (80 layers × 8 KV heads × 128 × 2 × 2 B).
LLAMA3_70B_H100_TP4 = replace(
    LLAMA3_8B_H100,
    model_name="meta-llama/Meta-Llama-3-70B-Instruct",
    gpus_per_replica=4,
    weights_bytes=141_100_000_000,
    kv_bytes_per_token=327_680,
    base_s=0.0162,
    prefill_s_per_token=7.1e-5,
    decode_s_per_seq=4.0e-5,
    kv_read_s_per_token=3.8e-8,
)

PROFILES: dict[str, ReplicaProfile] = {"llama3-8b-h100": LLAMA3_8B_H100, "llama3-70b-h100-tp4": LLAMA3_70B_H100_TP4}
