"""Measure a Llama-family decoder on this machine's GPU: per-layer op times in Vidur's mlp.csv format, and whole
steps (prefill and decode) of the full model with random weights, for the simulator's calibration.

    python3 bench/gpu_ops.py OUT_DIR [--model llama3-8b] [--budget-s 300] [--smoke]

Needs PyTorch with CUDA (``--smoke`` runs a two-layer model on the CPU to check the script, nothing more). What
it writes:

- ``OUT_DIR/<gpu>_<model>__mlp.csv``: Vidur's columns (microsoft/vidur ``data/profiling/compute/<gpu>/<model>/
  mlp.csv``) for TP 1 at Vidur's num_tokens grid (1–4,096), so ``simulator.calibration.load_vidur`` reads it as it
  reads Vidur's own files. Each op is timed as a CUDA graph of ``--reps`` back-to-back calls (no launch gaps: the
  GPU's time, as Vidur's CUPTI timer reports it), ``--samples`` replays, min/max/mean/median/std in ms. Weight
  GEMMs cycle through copies of their weights that together exceed twice the L2 cache, so every call reads its
  weights from HBM as a real forward pass does. Elementwise ops (RMSNorm, rotary, SiLU-and-mul) run through
  ``torch.compile`` when it works (vLLM fuses each into one kernel too), else eagerly; the JSON says which.
- ``OUT_DIR/<gpu>_<model>__steps.json``: the GPU and software, the HBM copy bandwidth, attention alone (causal
  prefill through SDPA: achieved share of dense BF16 peak; decode over 1,024 tokens of context: achieved bytes/s),
  and whole-model step times — prefill of one n-token prompt (logits for its last token) and decode of B sequences
  with 1,024 tokens of context each — every step a CUDA graph, median of ``--samples`` replays.

This is PyTorch (cuBLAS GEMMs, SDPA/FlashAttention, contiguous KV cache), not vLLM: no paged attention, no
custom kernels. docs/simulator.md says how its numbers are used and what they leave out.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.calibration import LAYER_OPS, LLAMA2_7B, LLAMA3_8B, ModelShape

MODELS = {"llama3-8b": LLAMA3_8B, "llama2-7b": LLAMA2_7B}
OPS = ("emb", *LAYER_OPS)
STATS = ("min", "max", "mean", "median", "std")
PREFILL_STEPS = (128, 256, 512, 1024, 2048, 4096)
DECODE_STEPS = (1, 8, 32, 64, 128, 256)
DECODE_CONTEXT = 1024
L2_FLUSH_BYTES = 2 * 60 * 2**20  # twice the H100/H200 L2 (50 / 60 MB): enough copies that none stays cached
ROPE_THETA = 500_000.0
EPS = 1e-5


def vidur_grid(max_tokens: int = 4096) -> list[int]:
    """Vidur's num_tokens points up to `max_tokens`: 1, 2, 4, 8, then steps of 8 to 1,024, 16 to 2,048, 32 to 4,096."""
    grid = [1, 2, 4, 8, *range(16, 1025, 8), *range(1040, 2049, 16), *range(2080, 4097, 32)]
    return [n for n in grid if n <= max_tokens]


def csv_header() -> list[str]:
    cols = [f"time_stats.{op}.{s}" for op in OPS for s in STATS]
    return [*cols, "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
            "num_tensor_parallel_workers"]  # fmt: skip


def stats_ms(samples: list[float]) -> dict[str, float]:
    return {
        "min": min(samples),
        "max": max(samples),
        "mean": statistics.fmean(samples),
        "median": statistics.median(samples),
        "std": statistics.pstdev(samples),
    }


class Timer:
    """Times a callable as the GPU sees it: a CUDA graph of `reps` calls, replayed `samples` times (CPU: wall)."""

    def __init__(self, torch: Any, device: str, reps: int, samples: int) -> None:
        self.torch, self.device, self.reps, self.samples = torch, device, reps, samples

    def __call__(self, fn: Callable[[int], Any]) -> list[float]:
        """ms per call; `fn(i)` is the i-th call (lets it pick the i-th weight copy)."""
        torch = self.torch
        if self.device == "cpu":
            fn(0)
            out = []
            for _ in range(self.samples):
                t0 = time.perf_counter()
                for i in range(self.reps):
                    fn(i)
                out.append((time.perf_counter() - t0) * 1e3 / self.reps)
            return out
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(2):
                fn(i)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(self.reps):
                fn(i)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(self.samples):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / self.reps)
        del graph
        return out


class Kernels:
    """The elementwise ops, compiled where torch.compile works here, else eager; `impl` says which."""

    def __init__(self, torch: Any, compile_ops: bool) -> None:
        self.torch = torch
        functional = torch.nn.functional

        def rms_norm(x: Any, w: Any) -> Any:
            return functional.rms_norm(x, (x.shape[-1],), w, EPS)

        def rope(q: Any, k: Any, positions: Any, cos_sin: Any) -> tuple[Any, Any]:
            cos, sin = cos_sin[positions].chunk(2, dim=-1)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

            def rotate(x: Any) -> Any:
                x1, x2 = x.float().chunk(2, dim=-1)
                return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

            return rotate(q), rotate(k)

        def silu_and_mul(x: Any) -> Any:
            gate, up = x.chunk(2, dim=-1)
            return functional.silu(gate) * up

        self.rms_norm, self.rope, self.silu_and_mul = rms_norm, rope, silu_and_mul
        self.impl = {"rms_norm": "eager", "rope": "eager", "silu_and_mul": "eager"}
        if compile_ops:
            for name in self.impl:
                try:
                    setattr(self, name, torch.compile(getattr(self, name)))
                    self.impl[name] = "torch.compile"
                except Exception as err:  # any failure: keep the eager op, say so
                    self.impl[name] = f"eager (compile failed: {type(err).__name__}: {err})"[:300]

    def warm(self, shape: ModelShape, device: str, dtype: Any) -> None:
        """Compile now, falling back to eager on failure: n = 1 (specialised), n = 2, then n = 3, after which only
        the token dimension is dynamic (torch.compile's automatic dynamic shapes) and the feature sizes stay static."""
        torch = self.torch
        hd = shape.head_dim
        cos_sin = rope_cache(torch, 8192, hd, device)
        for n in (1, 2, 3):
            x = torch.randn(n, shape.d_model, device=device, dtype=dtype)
            w = torch.ones(shape.d_model, device=device, dtype=dtype)
            q = torch.randn(n, shape.n_heads, hd, device=device, dtype=dtype)
            k = torch.randn(n, shape.n_kv_heads, hd, device=device, dtype=dtype)
            pos = torch.arange(n, device=device)
            up = torch.randn(n, 2 * shape.ffn_dim, device=device, dtype=dtype)
            for name, call in (
                ("rms_norm", lambda x=x, w=w: self.rms_norm(x, w)),
                ("rope", lambda q=q, k=k, pos=pos: self.rope(q, k, pos, cos_sin)),
                ("silu_and_mul", lambda up=up: self.silu_and_mul(up)),
            ):
                try:
                    call()
                except Exception as err:
                    eager = Kernels(torch, compile_ops=False)
                    setattr(self, name, getattr(eager, name))
                    self.impl[name] = f"eager (compiled call failed: {type(err).__name__}: {err})"[:300]


def rope_cache(torch: Any, max_pos: int, head_dim: int, device: str) -> Any:
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(max_pos, device=device, dtype=torch.float32), inv)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def profile_ops(torch: Any, shape: ModelShape, grid: list[int], timer: Timer, kernels: Kernels, device: str,
                deadline: float) -> list[dict[str, Any]]:  # fmt: skip
    """One Vidur row per num_tokens in `grid` (stops at `deadline`, keeping the rows done)."""
    dtype = torch.bfloat16
    d, hd, f = shape.d_model, shape.head_dim, shape.ffn_dim
    qkv_out = (shape.n_heads + 2 * shape.n_kv_heads) * hd

    def copies(rows: int, cols: int) -> list[Any]:
        count = 1 if device == "cpu" else max(2, math.ceil(L2_FLUSH_BYTES / (rows * cols * 2)))
        return [torch.randn(rows, cols, device=device, dtype=dtype) * 0.02 for _ in range(count)]

    w_qkv, w_o, w_up, w_down = copies(qkv_out, d), copies(d, d), copies(2 * f, d), copies(d, f)
    emb = torch.randn(shape.vocab, d, device=device, dtype=dtype)
    norm_w = torch.ones(d, device=device, dtype=dtype)
    cos_sin = rope_cache(torch, 8192, hd, device)
    rows = []
    for n in grid:
        if time.monotonic() > deadline:
            print(f"  budget spent: ops measured up to {rows[-1]['num_tokens'] if rows else 0} tokens", flush=True)
            break
        x = torch.randn(n, d, device=device, dtype=dtype)
        ids = torch.randint(0, shape.vocab, (n,), device=device)
        q = torch.randn(n, shape.n_heads, hd, device=device, dtype=dtype)
        k = torch.randn(n, shape.n_kv_heads, hd, device=device, dtype=dtype)
        pos = torch.randint(0, 8192, (n,), device=device)
        h_up = torch.randn(n, 2 * f, device=device, dtype=dtype)
        h_act = torch.randn(n, f, device=device, dtype=dtype)
        calls = op_calls(
            torch, kernels, (x, ids, q, k, pos, h_up, h_act), (w_qkv, w_o, w_up, w_down, emb, norm_w, cos_sin)
        )
        row: dict[str, Any] = {}
        for op in OPS:
            for stat, value in stats_ms(timer(calls[op])).items():
                row[f"time_stats.{op}.{stat}"] = value
        row.update(n_head=shape.n_heads, n_kv_head=shape.n_kv_heads, n_embd=d, n_expanded_embd=f,
                   vocab_size=shape.vocab, use_gated_mlp=True, num_tokens=n, num_tensor_parallel_workers=1)  # fmt: skip
        rows.append(row)
    return rows


def op_calls(torch: Any, kernels: Kernels, inputs: tuple[Any, ...], weights: tuple[Any, ...]) -> dict[str, Any]:
    """Each op of one layer as `call(i)`; GEMMs take the i-th copy of their weights (round robin)."""
    x, ids, q, k, pos, h_up, h_act = inputs
    w_qkv, w_o, w_up, w_down, emb, norm_w, cos_sin = weights
    linear = torch.nn.functional.linear
    return {
        "emb": lambda i: torch.nn.functional.embedding(ids, emb),
        "input_layernorm": lambda i: kernels.rms_norm(x, norm_w),
        "attn_pre_proj": lambda i: linear(x, w_qkv[i % len(w_qkv)]),
        "attn_rope": lambda i: kernels.rope(q, k, pos, cos_sin),
        "attn_post_proj": lambda i: linear(x, w_o[i % len(w_o)]),
        "post_attention_layernorm": lambda i: kernels.rms_norm(x, norm_w),
        "mlp_up_proj": lambda i: linear(x, w_up[i % len(w_up)]),
        "mlp_act": lambda i: kernels.silu_and_mul(h_up),
        "mlp_down_proj": lambda i: linear(h_act, w_down[i % len(w_down)]),
        "add": lambda i: x + x,
    }


class Llama:
    """A Llama-family decoder with random weights: enough to time prefill and decode steps, not to generate text."""

    def __init__(self, torch: Any, shape: ModelShape, kernels: Kernels, device: str, n_layers: int) -> None:
        self.torch, self.shape, self.k, self.device = torch, shape, kernels, device
        dtype, d, f, hd = torch.bfloat16, shape.d_model, shape.ffn_dim, shape.head_dim
        qkv_out = (shape.n_heads + 2 * shape.n_kv_heads) * hd

        def w(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=device, dtype=dtype) * 0.02

        self.layers = [
            {"qkv": w(qkv_out, d), "o": w(d, d), "up": w(2 * f, d), "down": w(d, f),
             "n1": torch.ones(d, device=device, dtype=dtype), "n2": torch.ones(d, device=device, dtype=dtype)}
            for _ in range(n_layers)
        ]  # fmt: skip
        self.emb, self.lm_head = w(shape.vocab, d), w(shape.vocab, d)
        self.final_norm = torch.ones(d, device=device, dtype=dtype)
        self.cos_sin = rope_cache(torch, 16384, hd, device)

    def _attention_inputs(self, h: Any, layer: dict[str, Any], positions: Any) -> tuple[Any, Any, Any]:
        s, hd = self.shape, self.shape.head_dim
        qkv = self.torch.nn.functional.linear(h, layer["qkv"])
        q, k, v = qkv.split((s.n_heads * hd, s.n_kv_heads * hd, s.n_kv_heads * hd), dim=-1)
        q, k = self.k.rope(q.view(-1, s.n_heads, hd), k.view(-1, s.n_kv_heads, hd), positions, self.cos_sin)
        return q, k, v.view(-1, s.n_kv_heads, hd)

    def _mlp(self, x: Any, layer: dict[str, Any]) -> Any:
        linear = self.torch.nn.functional.linear
        h = self.k.rms_norm(x, layer["n2"])
        return x + linear(self.k.silu_and_mul(linear(h, layer["up"])), layer["down"])

    def prefill(self, ids: Any) -> Any:
        torch, s = self.torch, self.shape
        sdpa, linear = torch.nn.functional.scaled_dot_product_attention, torch.nn.functional.linear
        n = ids.shape[0]
        positions = torch.arange(n, device=self.device)
        x = torch.nn.functional.embedding(ids, self.emb)
        for layer in self.layers:
            q, k, v = self._attention_inputs(self.k.rms_norm(x, layer["n1"]), layer, positions)
            o = sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True,
                     enable_gqa=True)  # fmt: skip
            x = x + linear(o[0].transpose(0, 1).reshape(n, s.d_model), layer["o"])
            x = self._mlp(x, layer)
        return linear(self.k.rms_norm(x[-1:], self.final_norm), self.lm_head)  # logits of the last token only

    def decode(self, ids: Any, caches: list[tuple[Any, Any]], context: int) -> Any:
        """One token for each of B sequences whose first `context` tokens are already in `caches`."""
        torch, s = self.torch, self.shape
        sdpa, linear = torch.nn.functional.scaled_dot_product_attention, torch.nn.functional.linear
        b = ids.shape[0]
        positions = torch.full((b,), context, device=self.device)
        x = torch.nn.functional.embedding(ids, self.emb)
        for layer, (k_cache, v_cache) in zip(self.layers, caches, strict=True):
            q, k, v = self._attention_inputs(self.k.rms_norm(x, layer["n1"]), layer, positions)
            k_cache[:, :, context] = k
            v_cache[:, :, context] = v
            o = sdpa(q[:, :, None], k_cache, v_cache, enable_gqa=True)  # (B, heads, 1, hd)
            x = x + linear(o.reshape(b, s.d_model), layer["o"])
            x = self._mlp(x, layer)
        return linear(self.k.rms_norm(x, self.final_norm), self.lm_head)


def attention_alone(torch: Any, shape: ModelShape, timer: Timer, device: str, peak_flops: float) -> dict[str, Any]:
    """Causal prefill attention (share of dense BF16 peak) and decode attention (bytes/s), one layer, SDPA."""
    sdpa, dtype, hd = torch.nn.functional.scaled_dot_product_attention, torch.bfloat16, shape.head_dim
    out: dict[str, Any] = {"prefill": [], "decode": []}
    for n in PREFILL_STEPS:
        q = torch.randn(1, shape.n_heads, n, hd, device=device, dtype=dtype)
        k = torch.randn(1, shape.n_kv_heads, n, hd, device=device, dtype=dtype)
        ms = statistics.median(timer(lambda i, q=q, k=k: sdpa(q, k, k, is_causal=True, enable_gqa=True)))
        flops = 4 * shape.d_model * n * n / 2  # QKᵀ and PV, halved by the causal mask (calibration.step_points)
        out["prefill"].append({"tokens": n, "ms": ms, "peak_share": flops / (ms / 1e3) / peak_flops})
    for b in DECODE_STEPS:
        q = torch.randn(b, shape.n_heads, 1, hd, device=device, dtype=dtype)
        kv_bytes = 2 * b * DECODE_CONTEXT * shape.n_kv_heads * hd * 2
        count = 1 if device == "cpu" else max(2, math.ceil(L2_FLUSH_BYTES / kv_bytes))
        kv = [
            (torch.randn(b, shape.n_kv_heads, DECODE_CONTEXT, hd, device=device, dtype=dtype),
             torch.randn(b, shape.n_kv_heads, DECODE_CONTEXT, hd, device=device, dtype=dtype))
            for _ in range(count)
        ]  # fmt: skip
        cycle = Timer(torch, device, max(timer.reps, count), timer.samples)  # each call reads a copy not in L2
        ms = statistics.median(cycle(lambda i, q=q, kv=kv: sdpa(q, *kv[i % len(kv)], enable_gqa=True)))
        out["decode"].append({"seqs": b, "context": DECODE_CONTEXT, "ms": ms, "bytes_per_s": kv_bytes / (ms / 1e3)})
        del kv
    return out


def copy_bandwidth(torch: Any, timer: Timer, device: str) -> float:
    """HBM bytes moved per second (read + write) by an elementwise kernel over 1 GiB (`torch.mul` into a second
    tensor: a plain copy in a CUDA graph becomes a memcpy node, which may run on a copy engine, not the SMs)."""
    src = torch.ones(2**29, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = statistics.median(timer(lambda i: torch.mul(src, 1.0, out=dst)))
    return 2 * 2**30 / (ms / 1e3)


def whole_steps(torch: Any, model: Llama, timer: Timer, device: str, deadline: float,
                prefill: tuple[int, ...] = PREFILL_STEPS,
                decode: tuple[tuple[int, int], ...] = tuple((b, DECODE_CONTEXT) for b in DECODE_STEPS),
                ) -> list[dict[str, Any]]:  # fmt: skip
    """Prefill of one n-token prompt for each n in `prefill`; decode of b sequences with `context` tokens each in
    the KV cache for each (b, context) in `decode`."""
    out = []
    vocab = model.shape.vocab
    for n in prefill:
        if time.monotonic() > deadline:
            break
        ids = torch.randint(0, vocab, (n,), device=device)
        samples = timer(lambda i, ids=ids: model.prefill(ids))
        out.append({"kind": "prefill", "n": n, "context": 0, "ms": statistics.median(samples), "samples": samples})
    s = model.shape
    for b, context in decode:
        if time.monotonic() > deadline:
            break
        caches = [
            tuple(torch.randn(b, s.n_kv_heads, context + 1, s.head_dim, device=device, dtype=torch.bfloat16)
                  for _ in range(2))
            for _ in model.layers
        ]  # fmt: skip
        ids = torch.randint(0, vocab, (b,), device=device)
        samples = timer(lambda i, ids=ids, caches=caches, c=context: model.decode(ids, caches, c))
        out.append({"kind": "decode", "n": b, "context": b * context, "ms": statistics.median(samples),
                    "samples": samples})  # fmt: skip
        del caches
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", choices=sorted(MODELS), default="llama3-8b")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--every", type=int, default=1, help="keep every k-th point of Vidur's grid")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop measuring ops/steps after this long")
    parser.add_argument("--no-steps", action="store_true", help="ops only (no whole-model steps)")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--context-sweep", action="store_true", help="also decode 64 and 128 sequences at 256-8,192")
    parser.add_argument("--smoke", action="store_true", help="CPU, two layers, three points: checks the script")
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + args.budget_s

    import torch

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (--smoke checks the script on the CPU)", file=sys.stderr)
        return 2
    shape = MODELS[args.model]
    gpu = "cpu" if device == "cpu" else torch.cuda.get_device_name()
    tag = gpu.lower().replace("nvidia ", "").split()[0] if device == "cuda" else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    timer = Timer(torch, device, 2 if args.smoke else args.reps, 2 if args.smoke else args.samples)
    kernels = Kernels(torch, compile_ops=not (args.no_compile or args.smoke))
    kernels.warm(shape, device, torch.bfloat16)
    print(f"{gpu}: elementwise ops {kernels.impl} ({time.monotonic() - started:.0f} s)", flush=True)

    grid = [1, 8, 128] if args.smoke else vidur_grid(args.max_tokens)[:: args.every]
    rows = profile_ops(torch, shape, grid, timer, kernels, device, deadline)
    csv_path = args.out / f"{tag}_{args.model}__mlp.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=csv_header())
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} op rows -> {csv_path} ({time.monotonic() - started:.0f} s)", flush=True)

    peak = 989e12  # dense BF16 of the H100 and H200 (simulator/profile.py); the share is against this figure
    report: dict[str, Any] = {
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "model": shape.name,
        "elementwise": kernels.impl,
        "reps_per_graph": timer.reps,
        "samples": timer.samples,
        "op_rows": len(rows),
        "peak_bf16_flops_assumed": peak,
    }
    if device == "cuda":
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        report["driver"] = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip()
        report["copy_bytes_per_s"] = copy_bandwidth(torch, timer, device)
        report["attention"] = attention_alone(torch, shape, timer, device, peak)
    if not args.no_steps:
        model = Llama(torch, shape, kernels, device, 2 if args.smoke else shape.n_layers)
        report["steps_layers"] = len(model.layers)
        decode = tuple((b, DECODE_CONTEXT) for b in DECODE_STEPS)
        if args.context_sweep:  # the KV-read term on its own: one batch size, context from 256 to 8,192 tokens
            decode += ((64, 256), (64, 4096), (64, 8192), (128, 4096))
        if args.smoke:
            decode = ((2, 32), (2, 64)) if args.context_sweep else ((2, 32),)
        prefill = (16,) if args.smoke else PREFILL_STEPS
        report["steps"] = whole_steps(torch, model, timer, device, deadline + 60, prefill, decode)
    report["elapsed_s"] = time.monotonic() - started
    (args.out / f"{tag}_{args.model}__steps.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "steps"}, indent=1)[:3000])
    for step in report.get("steps", []):
        print(f"  {step['kind']:7} {step['n']:5}: {step['ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
