"""Simulator calibration: fit the step-time model to Vidur's measured GPU profiles and show the residuals.

For every calibrated profile, per step (whole model, ms): measured op time (Vidur) + modelled attention + LM
head / all-reduces, against what the fitted linear model simulates, at prefill of 128–4,096 tokens and decode
batches of 1–256 (1,024 tokens of context each); median and max |error| over the table and over every fitted
point. Then the extrapolated profiles and the check of the op-size rescaling. Markdown on stdout
(BENCHMARKS.md, "Simulator calibration"); `--constants` prints the literals simulator/profile.py commits.

    .venv/bin/python bench/calibrate.py [--profiles ../shared/profiles/vidur] [--constants]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator.calibration import (  # noqa: E402
    CASES,
    DECODE_CONTEXT_TOKENS,
    EXTRAPOLATED,
    LLAMA2_7B,
    LLAMA2_70B,
    LLAMA3_8B,
    LLAMA3_70B,
    MEASURED_HERE,
    TABLE_DECODE,
    TABLE_PREFILL,
    Calibration,
    StepConstants,
    calibrate,
    calibrate_all,
    extrapolate,
    gemm_ratios,
    load_vidur,
    read_whole_steps,
    rescaling_check,
)
from simulator.profile import H200_SXM  # noqa: E402

PROFILES_DIR = REPO.parent / "shared" / "profiles" / "vidur"


def _table(cal: Calibration) -> list[str]:
    c = cal.constants
    case = cal.case
    lines = [
        f"**{case.key}** ({case.tp} × {case.gpu.name}; `{case.csv_name}` TP {case.tp}"
        + (f", rescaled to {case.target.name}" if case.target != case.measured else "")
        + f"): base {c.base_s * 1e3:.3f} ms, prefill {c.prefill_s_per_token * 1e6:.2f} µs/token, "
        f"decode {c.decode_s_per_seq * 1e6:.2f} µs/seq, KV read {c.kv_read_s_per_token * 1e9:.2f} ns/token; "
        f"weight reads at {cal.hbm_share:.0%} of datasheet HBM bandwidth",
        "",
        "| step | ops (measured) | attention | LM head + all-reduce | measured | simulated | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    shown = []
    for p, err in zip(cal.points, cal.errors(), strict=True):
        if p.n in (TABLE_PREFILL if p.kind == "prefill" else TABLE_DECODE):
            shown.append(abs(err))
            label = f"prefill {p.n}" if p.kind == "prefill" else f"decode ×{p.n}"
            sim = c.step_time(p.prefill_tokens, p.decode_seqs, p.context_tokens)
            lines.append(
                f"| {label} | {p.ops_s * 1e3:.2f} | {p.attention_s * 1e3:.2f} | {p.fixed_s * 1e3:.2f} | "
                f"{p.seconds * 1e3:.2f} | {sim * 1e3:.2f} | {err:+.1%} |"
            )
    lines += [
        "",
        f"|error| in the table: median {statistics.median(shown):.1%}, max {max(shown):.1%}; over all "
        f"{len(cal.points)} fitted points: median {cal.median_abs_error:.1%}, max {cal.max_abs_error:.1%}.",
        "",
    ]
    return lines


def _rescaling(profiles: Path) -> list[str]:
    pairs = [
        ("h100_meta-llama_Llama-2-7b-hf__mlp.csv", 1, LLAMA2_7B,
         "h100_meta-llama_Llama-2-70b-hf__mlp.csv", 4, LLAMA2_70B),
        ("a100_meta-llama_Meta-Llama-3-8B__mlp.csv", 1, LLAMA3_8B,
         "a100_meta-llama_Meta-Llama-3-70B__mlp.csv", 4, LLAMA3_70B),
    ]  # fmt: skip
    lines = ["Op-size rescaling check (per-layer time predicted from another model's ops, num_tokens 1–4,096):", ""]
    for src_csv, src_tp, src_shape, dst_csv, dst_tp, dst_shape in pairs:
        errs = rescaling_check(
            load_vidur(profiles / src_csv, src_tp), src_shape, load_vidur(profiles / dst_csv, dst_tp), dst_shape
        )
        errs = {n: e for n, e in errs.items() if n <= 4096}
        lines.append(
            f"- `{src_csv}` TP {src_tp} → `{dst_csv}` TP {dst_tp}: median |error| "
            f"{statistics.median(abs(e) for e in errs.values()):.1%}, max {max(abs(e) for e in errs.values()):.1%}"
        )
    return [*lines, ""]


def _constants(c: StepConstants) -> str:
    return (
        f"base {c.base_s * 1e3:.3f} ms, prefill {c.prefill_s_per_token * 1e6:.2f} µs/token, "
        f"decode {c.decode_s_per_seq * 1e6:.2f} µs/seq, KV read {c.kv_read_s_per_token * 1e9:.2f} ns/token"
    )


def _measured_here(profiles: Path, fitted: dict[str, StepConstants]) -> list[str]:
    """The H200 checks: extrapolation against the fit to measured ops, the GEMM timing method against Vidur's H100
    figures, and every model against whole-model steps measured on the same GPU."""
    h100_case = next(c for c in CASES if c.key == "llama3-8b-h100")
    h200_case = next(c for c in CASES if c.key == "llama3-8b-h200")
    guess = extrapolate(fitted["llama3-8b-h100"], h100_case.gpu, H200_SXM)
    cal = calibrate(h200_case, profiles)
    lines = [
        "H200 (measured here, bench/gpu_ops.py; simulator/profiles/README.md):",
        "",
        f"- fitted to the measured ops: {_constants(cal.constants)}",
        f"- what extrapolating the H100 fit would give: {_constants(guess)}",
    ]
    ours = load_vidur(MEASURED_HERE / "h200_llama2-7b__mlp.csv", 1)
    vidur = load_vidur(profiles / "h100_meta-llama_Llama-2-7b-hf__mlp.csv", 1)
    ratios = gemm_ratios(ours, vidur)
    small = [r for n, r in ratios.items() if n <= 64]
    large = [r for n, r in ratios.items() if n >= 2048]
    lines.append(
        "- timing method: Llama-2-7B weight GEMMs per layer, measured here on the H200 over Vidur's on the H100, "
        f"at {len(ratios)} num_tokens both measured: median {statistics.median(small):.3f} at ≤ 64 tokens "
        f"(memory-bound: the bandwidth ratio 3.35/4.8 is 0.70), {statistics.median(large):.3f} at ≥ 2,048 "
        "(compute-bound: both GPUs' dense BF16 peak is 989 TFLOP/s)"
    )
    lines += ["", "| step | measured whole model (run 1 / run 2) | ops + modelled attention | fitted | extrapolated |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    points = {(p.kind, p.n): p for p in cal.points}
    names = ("h200_llama3-8b__steps.json", "h200_llama3-8b__steps_run2.json")
    runs = [read_whole_steps(MEASURED_HERE / name) for name in names]
    for step in [*runs[0], *(s for s in runs[1] if s not in runs[0])]:
        kind, n, context = step
        first, other = runs[0].get(step), runs[1].get(step)
        ms = first or other
        assert ms is not None
        point = points.get((kind, n)) if context in (0, n * DECODE_CONTEXT_TOKENS) else None
        label = f"prefill {n}" if kind == "prefill" else f"decode ×{n} at {context // n:,}"
        cells = [" / ".join(f"{x:.2f}" if x else "–" for x in (first, other))]
        cells.append(f"{point.seconds * 1e3:.2f} ({point.seconds * 1e3 / ms - 1:+.1%})" if point else "–")
        for c in (cal.constants, guess):
            sim = c.step_time(n if kind == "prefill" else 0, n if kind == "decode" else 0, context) * 1e3
            cells.append(f"{sim:.2f} ({sim / ms - 1:+.1%})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", type=Path, default=PROFILES_DIR)
    parser.add_argument("--constants", action="store_true", help="print profile.py's literals and stop")
    args = parser.parse_args()
    if args.constants:
        for key, c in calibrate_all(args.profiles).items():
            print(
                f"{key}: base_s={c.base_s!r}, prefill_s_per_token={c.prefill_s_per_token!r}, "
                f"decode_s_per_seq={c.decode_s_per_seq!r}, kv_read_s_per_token={c.kv_read_s_per_token!r}"
            )
        return
    out: list[str] = []
    for case in CASES:
        out += _table(calibrate(case, args.profiles))
    fitted = calibrate_all(args.profiles)
    out += ["Extrapolated from the H100 Llama-3-8B fit (not measured):", ""]
    for key in EXTRAPOLATED:
        out.append(f"- **{key}**: {_constants(fitted[key])}")
    out += ["", *_rescaling(args.profiles), *_measured_here(args.profiles, fitted)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
