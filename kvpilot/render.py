"""Rendering canonical samples for people and programs: JSON (``--json``) and rich tables.

Shared by ``kvpilot parse`` and ``kvpilot scrape`` so both print the same shape: JSON objects whose keys
are exactly the ``ReplicaSample`` / ``GpuSample`` field names. JSON has no infinity or NaN, so the +Inf
histogram bound is the string ``"+Inf"`` (as in the exposition format), other infinities ``"+Inf"`` /
``"-Inf"``, and NaN (e.g. a histogram without ``_sum``) ``null``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from rich.console import Console
from rich.table import Table

from collector.samples import GpuSample, Histogram, ReplicaSample

Sample = ReplicaSample | GpuSample

# Columns for a table written to a pipe or a log, where rich would take 80 (or COLUMNS, which a parent process's
# readline exports as the size of its own terminal, not of this pipe) and cut every header to "outsi…".
PIPE_WIDTH = 160


def console(*, stderr: bool = False) -> Console:
    """A console for a command's tables: the terminal's width, or ``PIPE_WIDTH`` columns where output goes to a
    pipe or a file."""
    out = Console(stderr=stderr)
    if out.is_terminal:
        return out
    return Console(stderr=stderr, width=PIPE_WIDTH)


def _number(value: float) -> float | str | None:
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Histogram):
        return {
            "bounds": [_number(b) for b in value.bounds],
            "counts": [_number(c) for c in value.counts],
            "sum": _number(value.sum),
            "count": _number(value.count),
        }
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def sample_to_dict(sample: Sample) -> dict[str, Any]:
    """Field name -> JSON-ready value, in declaration order."""
    return {f.name: _jsonable(getattr(sample, f.name)) for f in fields(sample)}


def samples_json(replicas: Sequence[ReplicaSample], gpus: Sequence[GpuSample]) -> str:
    """``{"replicas": [...], "gpus": [...]}``, strict JSON (no NaN/Infinity literals)."""
    doc = {"replicas": [sample_to_dict(r) for r in replicas], "gpus": [sample_to_dict(g) for g in gpus]}
    return json.dumps(doc, indent=2, allow_nan=False)


_UNKNOWN = "[dim]—[/dim]"


def _cell(name: str, value: Any) -> str:
    if value is None:
        return _UNKNOWN
    if isinstance(value, Histogram):
        if value.count == 0:
            return "n=0"
        mean = "" if math.isnan(value.sum) else f" mean={value.sum / value.count:.4g}s"
        return f"n={value.count:g}{mean} ({len(value.bounds)} buckets)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v:g}" for k, v in sorted(value.items())) or _UNKNOWN
    if isinstance(value, float):
        if name in ("kv_usage", "utilisation", "sm_active"):
            return f"{value:.1%}"
        if name.endswith("_bytes"):
            return f"{value / 2**30:.2f} GiB"
        return f"{value:g}"
    return str(value)


def _table(title: str, samples: Sequence[Sample], header_field: str) -> Table:
    """Fields down the side, one column per sample: the field list is long, the sample list short."""
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("field", style="bold")
    for s in samples:
        table.add_column(str(getattr(s, header_field)))
    for f in fields(samples[0]):
        table.add_row(f.name, *(_cell(f.name, getattr(s, f.name)) for s in samples))
    return table


def print_tables(console: Console, replicas: Sequence[ReplicaSample], gpus: Sequence[GpuSample]) -> None:
    if replicas:
        console.print(_table("replicas", replicas, "replica"))
    if gpus:
        console.print(_table("gpus", gpus, "index"))
    if not replicas and not gpus:
        console.print("no replicas and no GPUs on this page")
