"""BurstGPT (Azure OpenAI GPT-3.5/GPT-4, arXiv 2401.17644): `Timestamp,Model,Request tokens,Response tokens,...`.

Format as published in HPMLL/BurstGPT (README @ ff1a7c63, data/BurstGPT_{1,2}.csv and the `without_fails` files;
the data files are Git LFS objects there, release v1.1/v2.0 assets): header
`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, first rows `5,ChatGPT,472,18,490,Conversation
log`, `45,ChatGPT,1087,230,1317,Conversation log`, `118,GPT-4,417,276,693,Conversation log`. `Timestamp` is seconds
from 0:00 of the first day; arrivals are rebased to the first request, as for every trace. The v2.0 `BurstGPT_3.csv`
inserts `Session ID` and `Elapsed time` after `Timestamp`, so columns are found by name, never by position.

Failed requests (`Response tokens` 0, the repository's own definition of a failure) are skipped: their output
length is unknown, and replaying them as one-token requests would count prefill-only requests as served demand. A
trace read this way equals the published `BurstGPT_without_fails_*` files. The trace carries no prefix ids: they
are synthesized, as for Azure.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from simulator.trace.model import RequestColumns, SpanCheck, check_tokens, text_lines
from simulator.trace.prefixes import synthesize_prefixes

HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
# What recognises the format: the columns the loader reads, plus `Model`, which no other accepted header has.
_SIGNATURE = frozenset(("Timestamp", "Model", "Request tokens", "Response tokens"))


def matches(header: list[str]) -> bool:
    return {h.strip() for h in header} >= _SIGNATURE


def load_burstgpt(path: Path, *, seed: int) -> RequestColumns:
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    failed = 0
    span = SpanCheck()
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(text_lines(path, f))
        header = next(reader, None)
        if header is None or not matches(header):
            raise ValueError(f"{path}: not a BurstGPT trace (expected header {','.join(HEADER)}, got {header})")
        names = [h.strip() for h in header]
        i_t, i_p, i_o = (names.index(c) for c in ("Timestamp", "Request tokens", "Response tokens"))
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                if len(row) != len(names):
                    raise ValueError(f"expected {len(names)} fields, got {len(row)}")
                t, p, o = float(row[i_t]), int(row[i_p]), int(row[i_o])
                if not math.isfinite(t) or t < 0:
                    raise ValueError("timestamp must be finite and >= 0")
                check_tokens(p, o)
                span.add(t, lineno)
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}: {','.join(row)[:200]!r}") from None
            if o == 0:
                failed += 1
                continue
            arrivals.append(t)
            prompts.append(max(p, 1))
            outputs.append(o)
    if not arrivals:
        raise ValueError(f"{path}: no requests ({failed} failed requests with 0 response tokens skipped)")
    a = np.asarray(arrivals, dtype=np.float64)
    a -= a.min()
    cols = RequestColumns(
        a, np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64), [()] * len(a)
    ).sorted()
    cols.prefix_blocks = synthesize_prefixes(cols.prompt_tokens, seed=seed)
    return cols
