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
    LLAMA2_7B,
    LLAMA2_70B,
    LLAMA3_8B,
    LLAMA3_70B,
    TABLE_DECODE,
    TABLE_PREFILL,
    Calibration,
    calibrate,
    calibrate_all,
    load_vidur,
    rescaling_check,
)

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
    for key in ("llama3-8b-h200", "llama3-8b-l4"):
        c = fitted[key]
        out.append(
            f"- **{key}**: base {c.base_s * 1e3:.3f} ms, prefill {c.prefill_s_per_token * 1e6:.2f} µs/token, "
            f"decode {c.decode_s_per_seq * 1e6:.2f} µs/seq, KV read {c.kv_read_s_per_token * 1e9:.2f} ns/token"
        )
    out += ["", *_rescaling(args.profiles)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
