"""Azure LLM inference trace 2023 (Splitwise, ISCA'24): `TIMESTAMP,ContextTokens,GeneratedTokens`."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import numpy as np

from simulator.trace.model import RequestColumns
from simulator.trace.prefixes import synthesize_prefixes

_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def _parse_ts(text: str) -> float:
    # 7 fractional digits (100 ns ticks) are one more than datetime accepts.
    head, _, frac = text.strip().partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def load_azure(path: Path, *, seed: int) -> RequestColumns:
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != _HEADER:
            raise ValueError(f"{path}: not an Azure 2023 trace (expected header {','.join(_HEADER)}, got {header})")
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                if len(row) != 3:
                    raise ValueError(f"expected 3 fields, got {len(row)}")
                t, p, o = _parse_ts(row[0]), int(row[1]), int(row[2])
                if p < 0 or o < 0:
                    raise ValueError("negative token count")
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}: {','.join(row)[:200]!r}") from None
            arrivals.append(t)
            prompts.append(max(p, 1))
            outputs.append(max(o, 1))
    if not arrivals:
        raise ValueError(f"{path}: no requests")
    a = np.asarray(arrivals, dtype=np.float64)
    a -= a.min()
    p_arr = np.asarray(prompts, dtype=np.int64)
    cols = RequestColumns(a, p_arr, np.asarray(outputs, dtype=np.int64), [()] * len(a)).sorted()
    cols.prefix_blocks = synthesize_prefixes(cols.prompt_tokens, seed=seed)
    return cols
