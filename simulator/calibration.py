"""Fits `ReplicaProfile`'s step-time constants to GPU operator timings measured by Vidur.

A step's time is built from measurements where there are some and from datasheet figures where there are none:
per-layer GEMM and elementwise op times from Vidur's profiles (microsoft/vidur `data/profiling/compute/<gpu>/
<model>/mlp.csv`, MIT, copied to ../shared/profiles/vidur), times the layer count; attention from FLOPs (prefill)
and KV bytes (decode); the LM head and embedding once per step; two all-reduces per layer under tensor parallelism.
`fit` then finds the linear model's constants by least squares on relative error over prefill steps of
128–4,096 tokens and decode steps of 1–256 sequences. Pure: reads CSVs, returns numbers (docs/simulator.md).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.profile import A100_SXM_80GB, H100_SXM, H200_SXM, L4, GpuModel

BF16_BYTES = 2
# Vidur's per-layer ops; `emb` is the token embedding, run once per step, not per layer.
LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
PREFILL_TOKENS = (128, 4096)  # fitted range, inclusive (every measured num_tokens in it)
DECODE_BATCH = (1, 256)
TABLE_PREFILL = (128, 256, 512, 1024, 2048, 4096)
TABLE_DECODE = (1, 8, 32, 64, 128, 256)
# Context per decoding sequence in the decode points: about the Azure 2023 conversation trace's mean prompt plus
# half its mean output. The KV-read term is exact in the model, so this choice only weighs it in the residual.
DECODE_CONTEXT_TOKENS = 1024
# FlashAttention forward reaches 50–73 % of A100 peak (Dao, "FlashAttention-2", ICLR 2024, abstract) and up to
# 75 % of H100 peak with FA3 (Shah et al., "FlashAttention-3", NeurIPS 2024); causal attention over 128–4,096
# tokens sits at the low end: we take 50 % of dense BF16 peak on every GPU (an assumption, not a measurement).
ATTENTION_MFU = 0.5
# NCCL all-reduce of one decode/prefill activation (≤ 4 MiB) among 2–8 H100s in a DGX: medians 0.02–0.045 ms
# (microsoft/vidur data/profiling/network/h100_dgx/all_reduce.csv, commit e26eb8f79fa9a6a7c38eac0f5291302402b20364).
# Taken as a flat 30 µs, twice per layer (after attention and after the MLP), on A100 too (assumed).
ALL_REDUCE_S = 30e-6


@dataclass(frozen=True)
class ModelShape:
    """A Llama-family decoder as its Hugging Face config.json gives it (gated MLP, grouped-query attention)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * BF16_BYTES

    def op_sizes(self, tp: int) -> dict[str, float]:
        """Per-GPU size of each layer op (weights for GEMMs, row width for elementwise ops): what its time scales by."""
        d, hd = self.d_model, self.head_dim
        return {
            "input_layernorm": d,
            "attn_pre_proj": d * (self.n_heads + 2 * self.n_kv_heads) * hd / tp,
            "attn_rope": (self.n_heads + self.n_kv_heads) * hd / tp,
            "attn_post_proj": d * d / tp,
            "post_attention_layernorm": d,
            "mlp_up_proj": 2 * d * self.ffn_dim / tp,
            "mlp_act": self.ffn_dim / tp,
            "mlp_down_proj": self.ffn_dim * d / tp,
            "add": d,
        }


# Shapes from each model's config.json on Hugging Face (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size); the Vidur CSVs repeat all but the layer count and vocab.
LLAMA2_7B = ModelShape("meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000)
LLAMA2_70B = ModelShape("meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000)
LLAMA3_8B = ModelShape("meta-llama/Meta-Llama-3-8B-Instruct", 32, 4096, 32, 8, 14336, 128256)
LLAMA3_70B = ModelShape("meta-llama/Meta-Llama-3-70B-Instruct", 80, 8192, 64, 8, 28672, 128256)


@dataclass(frozen=True)
class VidurOps:
    """One Vidur mlp.csv at one tensor-parallel degree: per num_tokens, the median seconds of each op."""

    path: Path
    tp: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    ffn_dim: int
    seconds: dict[int, dict[str, float]]  # num_tokens -> op -> s

    def check_shape(self, shape: ModelShape) -> None:
        got = (self.n_heads, self.n_kv_heads, self.d_model, self.ffn_dim)
        want = (shape.n_heads, shape.n_kv_heads, shape.d_model, shape.ffn_dim)
        if got != want:
            raise ValueError(f"{self.path.name}: shape (heads, kv heads, d, ffn) {got} is not {shape.name}'s {want}")


def load_vidur(path: Path, tp: int) -> VidurOps:
    """Median op times at `tp`; a num_tokens measured twice gets the mean of its two medians."""
    if not path.is_file():
        raise ValueError(f"Vidur profile not found: {path}")
    acc: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    shape: tuple[int, int, int, int] | None = None
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        needed = ["num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd", "n_expanded_embd"]
        needed += [f"time_stats.{op}.median" for op in ("emb", *LAYER_OPS)]
        missing = [c for c in needed if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path.name}: not a Vidur mlp.csv, missing column {missing[0]!r}")
        for line, row in enumerate(reader, start=2):
            try:
                if int(row["num_tensor_parallel_workers"]) != tp:
                    continue
                n = int(row["num_tokens"])
                shape = (int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"]), int(row["n_expanded_embd"]))
                for op in ("emb", *LAYER_OPS):
                    acc[n][op].append(float(row[f"time_stats.{op}.median"]) / 1e3)
            except ValueError as e:
                raise ValueError(f"{path.name} line {line}: {e}") from None
    if shape is None:
        raise ValueError(f"{path.name}: no rows with num_tensor_parallel_workers={tp}")
    seconds = {n: {op: statistics.fmean(v) for op, v in ops.items()} for n, ops in sorted(acc.items())}
    return VidurOps(path, tp, *shape, seconds)


@dataclass(frozen=True)
class CalibrationCase:
    """One profile to fit: measured on `measured` (the CSV's model), used for `target` (op times rescaled by size)."""

    key: str
    csv_name: str
    gpu: GpuModel
    measured: ModelShape
    target: ModelShape
    tp: int = 1
    directory: Path | None = None  # where the CSV lives when it is not one of Vidur's (../shared/profiles/vidur)


# Op timings kvpilot measured itself in Vidur's format (bench/gpu_ops.py; simulator/profiles/README.md).
MEASURED_HERE = Path(__file__).resolve().parent / "profiles"

CASES = (
    # No H100 profile of Llama-3-8B exists in Vidur: its ops are Llama-2-7B's rescaled to Llama-3-8B's sizes (GQA
    # halves the QKV projection, the MLP is 30 % wider, the vocabulary 4×). The rescaling, checked where both
    # sides are measured (Llama-2-7B TP-1 → Llama-2-70B TP-4 per GPU on H100), is in docs/simulator.md.
    CalibrationCase("llama3-8b-h100", "h100_meta-llama_Llama-2-7b-hf__mlp.csv", H100_SXM, LLAMA2_7B, LLAMA3_8B),
    CalibrationCase("llama2-7b-h100", "h100_meta-llama_Llama-2-7b-hf__mlp.csv", H100_SXM, LLAMA2_7B, LLAMA2_7B),
    # Llama-2-70B and Llama-3-70B share every layer shape; only the vocabulary (LM head) differs.
    CalibrationCase(
        "llama3-70b-h100-tp4", "h100_meta-llama_Llama-2-70b-hf__mlp.csv", H100_SXM, LLAMA2_70B, LLAMA3_70B, tp=4
    ),
    CalibrationCase("llama3-8b-a100", "a100_meta-llama_Meta-Llama-3-8B__mlp.csv", A100_SXM_80GB, LLAMA3_8B, LLAMA3_8B),
    CalibrationCase(
        "llama3-70b-a100-tp4", "a100_meta-llama_Meta-Llama-3-70B__mlp.csv", A100_SXM_80GB, LLAMA3_70B, LLAMA3_70B, tp=4
    ),
    # Measured by kvpilot on one H200 (PyTorch 2.11 cuBLAS GEMMs, compiled elementwise ops; bench/gpu_ops.py).
    CalibrationCase(
        "llama3-8b-h200", "h200_llama3-8b__mlp.csv", H200_SXM, LLAMA3_8B, LLAMA3_8B, directory=MEASURED_HERE
    ),
)


@dataclass(frozen=True)
class StepPoint:
    """One step the model is fitted to: its shape and its time from measured ops plus modelled attention."""

    kind: str  # "prefill" (one request's n prompt tokens) | "decode" (n sequences, one token each)
    n: int
    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    ops_s: float  # measured: n_layers × per-layer ops + embedding
    attention_s: float  # modelled (FLOPs or KV bytes)
    fixed_s: float  # modelled: LM head + all-reduces
    seconds: float


@dataclass(frozen=True)
class StepConstants:
    base_s: float
    prefill_s_per_token: float
    decode_s_per_seq: float
    kv_read_s_per_token: float

    def step_time(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        return (
            self.base_s
            + prefill_tokens * self.prefill_s_per_token
            + decode_seqs * self.decode_s_per_seq
            + context_tokens * self.kv_read_s_per_token
        )


@dataclass(frozen=True)
class Calibration:
    case: CalibrationCase
    constants: StepConstants
    points: tuple[StepPoint, ...]
    hbm_share: float  # achieved share of datasheet HBM bandwidth by the weight GEMMs at one token

    def errors(self) -> list[float]:
        """Relative error of the fitted model at every point, (simulated − measured) / measured."""
        c = self.constants
        return [c.step_time(p.prefill_tokens, p.decode_seqs, p.context_tokens) / p.seconds - 1 for p in self.points]

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(e) for e in self.errors())

    @property
    def max_abs_error(self) -> float:
        return max(abs(e) for e in self.errors())


def _sig(x: float, digits: int = 4) -> float:
    """Four significant digits: what profile.py commits (the tests compare the two exactly)."""
    x = float(x)
    return 0.0 if x == 0 else round(x, digits - 1 - math.floor(math.log10(abs(x))))


def hbm_share(ops: VidurOps, shape: ModelShape) -> float:
    """Achieved share of datasheet bandwidth: one token's weight GEMMs read every weight once and do little else."""
    sizes = shape.op_sizes(ops.tp)
    weight_bytes = sum(sizes[op] for op in GEMM_OPS) * BF16_BYTES
    return weight_bytes / sum(ops.seconds[1][op] for op in GEMM_OPS)


def step_points(case: CalibrationCase, ops: VidurOps) -> tuple[tuple[StepPoint, ...], float]:
    """The measured-plus-modelled steps of `case`, and the HBM bandwidth (bytes/s) its weight reads achieve."""
    ops.check_shape(case.measured)
    if 1 not in ops.seconds:
        raise ValueError(f"{ops.path.name}: no num_tokens=1 row at TP {ops.tp} to measure achieved bandwidth")
    measured, target, gpu, tp = case.measured.op_sizes(case.tp), case.target.op_sizes(case.tp), case.gpu, case.tp
    scale = {op: target[op] / measured[op] for op in LAYER_OPS}
    bandwidth = hbm_share(ops, case.measured)
    t = case.target
    lm_head_s = t.vocab * t.d_model * BF16_BYTES / tp / bandwidth
    all_reduce_s = 2 * t.n_layers * ALL_REDUCE_S if tp > 1 else 0.0
    kv_read_s = t.kv_bytes_per_token / tp / bandwidth
    points = []
    for n, sec in ops.seconds.items():
        ops_s = t.n_layers * sum(sec[op] * scale[op] for op in LAYER_OPS) + sec["emb"]
        fixed_s = lm_head_s + all_reduce_s
        if PREFILL_TOKENS[0] <= n <= PREFILL_TOKENS[1]:
            # QKᵀ and PV: 2 · 2·n²·d FLOP per layer, halved by the causal mask, split over the TP ranks.
            attn = 4 * t.n_layers * t.d_model * n * n / 2 / tp / (gpu.bf16_flops * ATTENTION_MFU)
            points.append(StepPoint("prefill", n, n, 0, 0, ops_s, attn, fixed_s, ops_s + attn + fixed_s))
        if DECODE_BATCH[0] <= n <= DECODE_BATCH[1]:
            context = n * DECODE_CONTEXT_TOKENS
            attn = context * kv_read_s
            points.append(StepPoint("decode", n, 0, n, context, ops_s, attn, fixed_s, ops_s + attn + fixed_s))
    return tuple(points), bandwidth


def fit(points: tuple[StepPoint, ...], kv_read_s_per_token: float) -> StepConstants:
    """Least squares on relative error; prefill and decode points weigh equally as groups. KV reads are not fitted:
    they are exactly linear in context tokens (bytes over achieved bandwidth)."""
    counts = {k: sum(p.kind == k for p in points) for k in ("prefill", "decode")}
    if min(counts.values()) < 2:
        raise ValueError(f"too few points to fit: {counts}")
    a = np.array([[1.0, p.prefill_tokens, p.decode_seqs] for p in points])
    y = np.array([p.seconds - p.context_tokens * kv_read_s_per_token for p in points])
    w = np.array([1.0 / (p.seconds * math.sqrt(counts[p.kind])) for p in points])
    (base, prefill, decode), *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    if base <= 0 or prefill < 0 or decode < 0:
        raise ValueError(f"fit gave a negative constant: base {base}, prefill {prefill}, decode {decode}")
    return StepConstants(_sig(base), _sig(prefill), _sig(decode), _sig(kv_read_s_per_token))


def calibrate(case: CalibrationCase, profiles_dir: Path) -> Calibration:
    ops = load_vidur((case.directory or profiles_dir) / case.csv_name, case.tp)
    points, bandwidth = step_points(case, ops)
    kv_read = case.target.kv_bytes_per_token / case.tp / bandwidth
    return Calibration(case, fit(points, kv_read), points, bandwidth / case.gpu.hbm_bytes_per_s)


def extrapolate(c: StepConstants, source: GpuModel, target: GpuModel) -> StepConstants:
    """Constants for a GPU nobody measured: memory-bound terms (base: weight reads; KV reads) scale by bandwidth,
    compute-bound ones (prefill tokens; extra decode sequences) by dense BF16 peak. An estimate, not a fit."""
    bw = source.hbm_bytes_per_s / target.hbm_bytes_per_s
    flops = source.bf16_flops / target.bf16_flops
    return StepConstants(
        _sig(c.base_s * bw), _sig(c.prefill_s_per_token * flops), _sig(c.decode_s_per_seq * flops),
        _sig(c.kv_read_s_per_token * bw),
    )  # fmt: skip


EXTRAPOLATED = {"llama3-8b-l4": ("llama3-8b-h100", L4)}


def rescaling_check(
    source: VidurOps, source_shape: ModelShape, target: VidurOps, target_shape: ModelShape
) -> dict[int, float]:
    """Relative error of predicting `target`'s measured per-layer time from `source`'s ops rescaled by op size, per
    num_tokens both measured: the check behind profiles whose model was not measured on their GPU."""
    src, dst = source_shape.op_sizes(source.tp), target_shape.op_sizes(target.tp)
    out = {}
    for n in sorted(source.seconds.keys() & target.seconds.keys()):
        predicted = sum(source.seconds[n][op] * dst[op] / src[op] for op in LAYER_OPS)
        out[n] = predicted / sum(target.seconds[n][op] for op in LAYER_OPS) - 1
    return out


def gemm_ratios(ours: VidurOps, reference: VidurOps) -> dict[int, float]:
    """Per num_tokens both measured, the summed weight-GEMM time of one layer in `ours` over `reference` (the same
    model shape): how a timing method compares with Vidur's where the GPUs' figures say what to expect."""
    common = ours.seconds.keys() & reference.seconds.keys()
    return {
        n: sum(ours.seconds[n][op] for op in GEMM_OPS) / sum(reference.seconds[n][op] for op in GEMM_OPS)
        for n in sorted(common)
    }


def read_whole_steps(path: Path) -> dict[tuple[str, int, int], float]:
    """Whole-model step times from bench/gpu_ops.py's JSON: (kind, n, context tokens) -> median ms."""
    report = json.loads(path.read_text())
    return {(s["kind"], int(s["n"]), int(s["context"])): float(s["ms"]) for s in report["steps"]}


def calibrate_all(profiles_dir: Path) -> dict[str, StepConstants]:
    """Every calibrated and extrapolated profile's constants, keyed as `simulator.PROFILES`."""
    fitted = {case.key: calibrate(case, profiles_dir).constants for case in CASES}
    for key, (source, gpu) in EXTRAPOLATED.items():
        fitted[key] = extrapolate(fitted[source], next(c.gpu for c in CASES if c.key == source), gpu)
    return fitted
