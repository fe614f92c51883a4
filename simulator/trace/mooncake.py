"""Mooncake traces (FAST'25): JSON lines `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`.

Each hash id names one 512-token block of the prompt; shared leading ids mean a shared KV prefix. Checked against
kvcache-ai/Mooncake: FAST25-release/traces/synthetic_trace.jsonl (@ 3b5a5941, in ../shared/traces) and
conversation_trace.jsonl (@ a2a4b18a; integer milliseconds from 0, e.g. 5999), and an excerpt of the arXiv trace
mooncake_trace.jsonl as copied in hiverge/dynamo @ 4915d8fa (starts at 1,178,625 ms): the same four fields.
toolagent_trace.jsonl was not in our index; public tools read it with the same fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator.trace.model import MAX_TOKENS, RequestColumns, SpanCheck, text_lines


def load_mooncake(path: Path, *, seed: int) -> RequestColumns:
    del seed  # the trace carries its own prefixes
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    blocks: list[tuple[int, ...]] = []
    span = SpanCheck()
    with path.open(encoding="utf-8-sig") as f:  # a BOM, as the format sniff and the CSV loaders allow
        for lineno, line in enumerate(text_lines(path, f), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                t = float(rec["timestamp"]) / 1000.0
                p = int(rec["input_length"])
                o = int(rec["output_length"])
                ids = rec.get("hash_ids", [])
                if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
                    raise ValueError("hash_ids must be a list of integers")
                if p < 0 or o < 0 or not np.isfinite(t):
                    raise ValueError("negative length or non-finite timestamp")
                if max(p, o) > MAX_TOKENS:
                    raise ValueError(f"length above {MAX_TOKENS:.0e}")
                span.add(t, lineno)
            # Overflow: a length of Infinity; Recursion: a line nesting 100,000 arrays (json's own limit)
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
                raise ValueError(f"{path}:{lineno}: {type(e).__name__}: {e}: {line[:200]!r}") from None
            arrivals.append(t)
            prompts.append(max(p, 1))
            outputs.append(max(o, 1))
            blocks.append(tuple(ids))
    if not arrivals:
        raise ValueError(f"{path}: no requests")
    a = np.asarray(arrivals, dtype=np.float64)
    a -= a.min()
    return RequestColumns(a, np.asarray(prompts, np.int64), np.asarray(outputs, np.int64), blocks).sorted()
