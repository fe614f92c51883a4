"""Replica profiles: engine limits, KV pool sizing and the step-time model.

Step time of one engine iteration (a Vidur-style linear model, Agrawal et al., MLSys'24):

    t = base_s + prefill_tokens · prefill_s_per_token + decode_seqs · decode_s_per_seq
        + context_tokens · kv_read_s_per_token

The constants are fitted to GPU operator timings measured by Vidur (../shared/profiles/vidur, MIT) — and, for the
H200, by kvpilot on an H200 (simulator/profiles/) — by `simulator/calibration.py`: measured per-layer GEMMs,
attention from FLOPs and KV bytes at datasheet figures, LM head once per step.
`tests/unit/simulator/test_calibration.py` refits them from the CSVs and fails if these literals drift;
`bench/calibrate.py` prints the fit and its residuals (BENCHMARKS.md, "Simulator calibration"). The default
profile is Llama-3-8B (BF16) on one H100 SXM 80 GB. The L4 profile is extrapolated from the H100 fit by bandwidth
and FLOPs ratios, not measured. See docs/simulator.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

GIB = 1024**3


@dataclass(frozen=True)
class GpuModel:
    """One GPU as nvidia-smi names it, with its datasheet HBM bandwidth and dense BF16 peak (used by calibration)."""

    name: str = "NVIDIA H100 80GB HBM3"
    memory_bytes: int = 80 * GIB
    idle_power_w: float = 70.0
    max_power_w: float = 700.0
    idle_temp_c: float = 33.0
    max_temp_c: float = 78.0
    hbm_bytes_per_s: float = 3.35e12
    bf16_flops: float = 989e12


# Datasheet figures (dense BF16 is half the "with sparsity" figure NVIDIA prints):
# H100 SXM5 80 GB: 3.35 TB/s HBM3, 989 TFLOPS, 700 W (nvidia.com/en-us/data-center/h100/).
H100_SXM = GpuModel()
# A100 SXM4 80 GB: 2,039 GB/s HBM2e, 312 TFLOPS, 400 W (nvidia.com/en-us/data-center/a100/).
A100_SXM_80GB = GpuModel("NVIDIA A100-SXM4-80GB", 80 * GIB, 60.0, 400.0, 32.0, 75.0, 2.039e12, 312e12)
# H200 SXM 141 GB: 4.8 TB/s HBM3e, the H100's compute (989 TFLOPS), up to 700 W (nvidia.com/en-us/data-center/h200/).
H200_SXM = GpuModel("NVIDIA H200", 141 * 10**9, 75.0, 700.0, 33.0, 78.0, 4.8e12, 989e12)
# L4 24 GB GDDR6: 300 GB/s, 121 TFLOPS (242 with sparsity), 72 W (nvidia.com/en-us/data-center/l4/).
L4 = GpuModel("NVIDIA L4", 24 * 10**9, 16.0, 72.0, 35.0, 80.0, 3.0e11, 121e12)
GPUS: dict[str, GpuModel] = {"h100": H100_SXM, "a100": A100_SXM_80GB, "h200": H200_SXM, "l4": L4}


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
    # Llama-3-8B on one H100, fitted to measured profiles (LLAMA3_8B_H100 below).
    base_s: float = 0.005816
    prefill_s_per_token: float = 2.05e-5
    decode_s_per_seq: float = 1.82e-5
    kv_read_s_per_token: float = 5.052e-8
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


# Calibrated profiles (`python bench/calibrate.py`; residual = |simulated − measured| / measured over prefill of
# 128–4,096 tokens and decode batches of 1–256, median / max). Engine limits and KV sizing are not fitted.
# Llama-3-8B on 1 × H100: Llama-2-7B's H100 op times (h100_meta-llama_Llama-2-7b-hf__mlp.csv, TP 1) rescaled to
# Llama-3-8B's layer sizes; residual 5.4 % / 23.9 %. These are ReplicaProfile's defaults.
LLAMA3_8B_H100 = ReplicaProfile()

# Llama-2-7B on 1 × H100, straight from h100_meta-llama_Llama-2-7b-hf__mlp.csv (TP 1); residual 5.1 % / 22.2 %.
# 6.74 B parameters; 512 KiB of KV per token (32 layers × 32 KV heads × 128 × 2 × 2 B); 4k context.
LLAMA2_7B_H100 = replace(
    LLAMA3_8B_H100,
    model_name="meta-llama/Llama-2-7b-chat-hf",
    weights_bytes=13_476_000_000,
    kv_bytes_per_token=524_288,
    max_model_len=4096,
    base_s=0.005066,
    prefill_s_per_token=1.932e-5,
    decode_s_per_seq=1.858e-5,
    kv_read_s_per_token=2.021e-7,
)

# Llama-3-70B BF16 on 4 × H100 (tensor parallel): h100_meta-llama_Llama-2-70b-hf__mlp.csv TP-4 rows (same layer
# shapes as Llama-3-70B; the LM head is Llama-3's), plus two all-reduces per layer; residual 4.5 % / 28.1 %.
# 141 GB of weights; 320 KiB of KV per token (80 layers × 8 KV heads × 128 × 2 × 2 B), a quarter per GPU.
LLAMA3_70B_H100_TP4 = replace(
    LLAMA3_8B_H100,
    model_name="meta-llama/Meta-Llama-3-70B-Instruct",
    gpus_per_replica=4,
    weights_bytes=141_100_000_000,
    kv_bytes_per_token=327_680,
    base_s=0.01824,
    prefill_s_per_token=5.013e-5,
    decode_s_per_seq=2.84e-5,
    kv_read_s_per_token=3.045e-8,
)

# Llama-3-8B on 1 × A100 80 GB: a100_meta-llama_Meta-Llama-3-8B__mlp.csv (TP 1); residual 5.1 % / 29.3 %.
LLAMA3_8B_A100 = replace(
    LLAMA3_8B_H100,
    gpu=A100_SXM_80GB,
    base_s=0.009401,
    prefill_s_per_token=6.566e-5,
    decode_s_per_seq=4.683e-5,
    kv_read_s_per_token=8.293e-8,
)

# Llama-3-70B on 4 × A100 80 GB: a100_meta-llama_Meta-Llama-3-70B__mlp.csv TP-4 rows; residual 4.4 % / 26.0 %.
LLAMA3_70B_A100_TP4 = replace(
    LLAMA3_70B_H100_TP4,
    gpu=A100_SXM_80GB,
    base_s=0.02699,
    prefill_s_per_token=1.549e-4,
    decode_s_per_seq=1.17e-4,
    kv_read_s_per_token=5.457e-8,
)

# Llama-3-8B on one H200 141 GB: fitted, as the Vidur profiles are, to op timings kvpilot measured on an H200
# (simulator/profiles/h200_llama3-8b__mlp.csv, bench/gpu_ops.py, 2026-12-04); residual 8.2 % / 25.9 %. Against
# whole-model steps measured on the same GPU: within -21 % / +14 % (BENCHMARKS.md, "Simulator calibration").
LLAMA3_8B_H200 = replace(
    LLAMA3_8B_H100,
    gpu=H200_SXM,
    base_s=0.003784,
    prefill_s_per_token=1.944e-5,
    decode_s_per_seq=1.329e-5,
    kv_read_s_per_token=3.496e-8,
)
# Extrapolated, not measured: the H100 Llama-3-8B fit with base and KV reads scaled by HBM bandwidth and the
# prefill and decode terms by dense BF16 peak (`calibration.extrapolate`; checked where a GPU was measured: the
# H200, in BENCHMARKS.md "Simulator calibration").
LLAMA3_8B_L4 = replace(
    LLAMA3_8B_H100,
    gpu=L4,
    max_model_len=8192,  # 24 GB leaves ~9.5k tokens of KV next to 16 GB of weights
    base_s=0.06495,
    prefill_s_per_token=1.676e-4,
    decode_s_per_seq=1.488e-4,
    kv_read_s_per_token=5.641e-7,
)

PROFILES: dict[str, ReplicaProfile] = {
    "llama3-8b-h100": LLAMA3_8B_H100,
    "llama2-7b-h100": LLAMA2_7B_H100,
    "llama3-70b-h100-tp4": LLAMA3_70B_H100_TP4,
    "llama3-8b-a100": LLAMA3_8B_A100,
    "llama3-70b-a100-tp4": LLAMA3_70B_A100_TP4,
    "llama3-8b-h200": LLAMA3_8B_H200,
    "llama3-8b-l4": LLAMA3_8B_L4,
}
