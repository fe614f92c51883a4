"""Azure LLM inference traces, 2023 (Splitwise) and 2024 (DynamoLLM): `TIMESTAMP,ContextTokens,GeneratedTokens`.

Both years share the header; the timestamps differ (verified against Azure/AzurePublicDataset):
- 2023 (data/AzureLLMInferenceTrace_{code,conv}.csv, copied to ../shared/traces): naive, 7 fractional digits,
  `2023-11-16 18:17:03.9799600`;
- 2024 (AzureLLMInferenceTrace_{code,conv}_1week.csv, release assets listed in AzureLLMInferenceDataset2024Links.txt):
  a UTC offset and 6 digits, none when the microseconds are zero: `2024-05-10 00:00:00.009930+00:00`,
  `2024-05-12 00:00:00+00:00` (analysis/AzureLLMInferenceDataset2024.ipynb @ 7f7c0f4e shows both).
Naive timestamps are read as UTC, so arrivals do not depend on the machine's time zone.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.trace.model import RequestColumns, SpanCheck, check_tokens, text_lines
from simulator.trace.prefixes import synthesize_prefixes

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", re.ASCII)  # an epoch or offset, not a date
_TS = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", re.ASCII)


def matches(header: list[str]) -> bool:
    return tuple(h.strip() for h in header) == HEADER


@lru_cache(maxsize=4096)
def _minute_epoch(minute: str) -> int:
    # One datetime per distinct minute: a week of the 2024 trace is 2.7e7 rows but 10^4 minutes.
    return int(datetime.strptime(minute.replace("T", " "), "%Y-%m-%d %H:%M").replace(tzinfo=UTC).timestamp())


def _offset_s(zone: str) -> int:
    if zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise ValueError(f"bad UTC offset {zone!r}")
    return (hours * 3600 + minutes * 60) * (-1 if zone[0] == "-" else 1)


def parse_ts(text: str) -> tuple[float, bool]:
    """Seconds since the epoch, and whether the timestamp carried a UTC offset."""
    m = _TS.fullmatch(text.strip())
    if m is None:
        numeric = _NUMBER.fullmatch(text.strip()) is not None
        raise ValueError(
            f"bad timestamp {text.strip()[:40]!r} (expected YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]"
            + (
                "; seconds or milliseconds as a number are read under the BurstGPT header `Timestamp,Model,Request "
                "tokens,Response tokens`, Timestamp in seconds: docs/simulator.md, 'Traces')"
                if numeric
                else ")"
            )
        )
    minute, seconds, frac, zone = m.groups()
    if int(seconds) > 59:
        raise ValueError(f"bad timestamp {text.strip()[:40]!r}: second {seconds}")
    base = _minute_epoch(minute) + int(seconds) - (_offset_s(zone) if zone else 0)
    # The integer part is exact; adding the fraction last rounds once, as the 2023 loader always did.
    return float(base) + (float("0." + frac) if frac else 0.0), zone is not None


def load_azure(path: Path, *, seed: int) -> RequestColumns:
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    zoned: bool | None = None
    span = SpanCheck()
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(text_lines(path, f))
        header = next(reader, None)
        if header is None or not matches(header):
            raise ValueError(f"{path}: not an Azure trace (expected header {','.join(HEADER)}, got {header})")
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                if len(row) != 3:
                    raise ValueError(f"expected 3 fields, got {len(row)}")
                t, has_zone = parse_ts(row[0])
                if zoned is None:
                    zoned = has_zone
                elif has_zone != zoned:
                    # Mixing would shift some rows by the machine-independent but unknown local offset.
                    raise ValueError("timestamps mix rows with and without a UTC offset")
                p, o = int(row[1]), int(row[2])
                check_tokens(p, o)
                span.add(t, lineno)
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
