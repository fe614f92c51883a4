"""`load_trace`: pick the loader by what the path is, then apply the time window and the scalings.

time_scale multiplies every time (0.5 replays twice as fast, with rates doubled accordingly); rate_scale
multiplies the request rate at constant time: whole extra copies of the trace, each jittered and with its own
per-request prefix ids (template prefixes stay shared), plus a seeded thinning for the fractional part.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.trace import azure, burstgpt
from simulator.trace.model import MAX_LINE, RequestColumns, Trace
from simulator.trace.mooncake import load_mooncake
from simulator.trace.servegen import ServeGenSource, read_servegen
from simulator.trace.synthetic import MAX_CANDIDATES, SyntheticSpec, generate


@dataclass(frozen=True)
class CsvFormat:
    """A request-level CSV trace, recognised by its header (never by its file name)."""

    header: str  # as error messages and docs show it
    matches: Callable[[list[str]], bool]
    load: Callable[..., RequestColumns]


CSV_FORMATS: dict[str, CsvFormat] = {
    "Azure 2023/2024": CsvFormat(",".join(azure.HEADER), azure.matches, azure.load_azure),
    "BurstGPT": CsvFormat(
        ",".join(burstgpt.HEADER) + " (columns by name; extra ones ignored)", burstgpt.matches, burstgpt.load_burstgpt
    ),
}
_TEMPLATE_BASE = 1 << 40


def load_trace(
    path: str | Path,
    *,
    time_scale: float = 1.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    start_s: float | None = None,
    duration_s: float | None = None,
) -> Trace:
    """Load a request-level file (Azure 2023/2024 or BurstGPT CSV, Mooncake JSON lines; told apart by their first
    line, whatever the file is called), a ServeGen directory, or `synthetic[:k=v,...]`.

    Raises FileNotFoundError for a missing path and ValueError (naming the file and line) for bad content.
    """
    if not (time_scale > 0 and np.isfinite(time_scale)):
        raise ValueError(f"time_scale must be > 0, got {time_scale}")
    if not (rate_scale > 0 and np.isfinite(rate_scale)):
        raise ValueError(f"rate_scale must be > 0, got {rate_scale}")
    if start_s is not None and start_s < 0:
        raise ValueError(f"start_s must be >= 0, got {start_s}")
    if duration_s is not None and duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    text = str(path)
    if text == "synthetic" or text.startswith("synthetic:"):
        spec = SyntheticSpec.parse(text)
        cols = generate(spec, seed=seed)
        return _finish(text, cols, spec.duration_s, time_scale, rate_scale, seed, start_s, duration_s)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"trace not found: {p}")
    try:
        if p.is_dir():
            return _servegen(p, time_scale, rate_scale, seed, start_s, duration_s)
        if not p.is_file():
            # A pipe (`--trace <(zcat t.gz)`) gave its first 8 KiB to the format sniff and the rest to the loader: 64
            # of 300 Mooncake requests were dropped without a word; a FIFO with no writer was waited on for good.
            raise ValueError(
                f"{p}: not a regular file (a pipe, FIFO or device): a trace is read twice, its first line telling "
                "the format; write it to a file first (zcat trace.csv.gz > trace.csv)"
            )
        cols = file_loader(p)(p, seed=seed)
    except csv.Error as e:  # a field past the csv module's 128 KiB limit: an _csv.Error traceback, exit 1
        raise ValueError(f"{p}: unreadable CSV: {e}") from None
    except OSError as e:  # unreadable (permissions, I/O): a traceback in the commands that expect ValueError
        raise ValueError(f"{e.filename or p}: cannot read: {e.strerror or e}") from None
    # Just past the last arrival, so that the window keeps it; nextafter where 1e-9 is below the spacing of floats.
    last = float(cols.arrival_s[-1]) if len(cols) else 0.0
    duration = max(last + 1e-9, float(np.nextafter(last, np.inf))) if len(cols) else 0.0
    return _finish(p.name, cols, duration, time_scale, rate_scale, seed, start_s, duration_s)


def file_loader(p: Path) -> Callable[..., RequestColumns]:
    """The loader for a request-level file, from its first non-blank line: JSON is Mooncake (whose loader names a
    line that is not an object), anything else must be one of the CSV_FORMATS headers."""
    first = _first_line(p)
    if first is None:
        raise ValueError(f"{p}: no requests (empty file)")
    if first.startswith(("{", "[")):
        return load_mooncake
    header = next(csv.reader([first]), [])
    for fmt in CSV_FORMATS.values():
        if fmt.matches(header):
            return fmt.load
    accepted = "; ".join(f"{name}: {fmt.header}" for name, fmt in CSV_FORMATS.items())
    raise ValueError(
        f"{p}:1: unknown trace format: first line {first[:120]!r} is neither a JSON object (Mooncake JSON lines) nor "
        f"an accepted CSV header ({accepted}); a ServeGen trace is a directory, a synthetic one `synthetic:...`. "
        f"Requests of your own: {OWN_REQUESTS}"
    )


# What a user with a log of their own requests writes, said where an unknown header or a numeric Azure timestamp is
# refused: BurstGPT's columns by name (its signature; `Model` any text, extra columns ignored), seconds in `Timestamp`.
OWN_REQUESTS = (
    "a CSV with the header `Timestamp,Model,Request tokens,Response tokens`, Timestamp in seconds from any origin, "
    "none below 0 (milliseconds divided by 1000), Model any text (docs/simulator.md, 'Traces')"
)


# A trace's first line is a CSV header or one JSON object; one longer than this is no trace (/dev/zero was read
# until memory ran out: a MemoryError traceback).
MAX_FIRST_LINE = MAX_LINE


def _first_line(p: Path) -> str | None:
    # Undecodable bytes are checked a line at a time: a strict reader decodes 8 KiB ahead, so a bad byte some lines
    # further down was reported here as an unknown format (the loader names its line).
    with p.open(encoding="utf-8-sig", errors="surrogateescape") as f:
        lineno = 0
        while line := f.readline(MAX_FIRST_LINE + 1):
            lineno += 1
            if len(line) > MAX_FIRST_LINE:
                raise ValueError(f"{p}:{lineno}: unknown trace format: a line longer than {MAX_FIRST_LINE} characters")
            try:
                line.encode()
            except UnicodeEncodeError:
                raise ValueError(
                    f"{p}:{lineno}: unknown trace format: not UTF-8 text (a compressed or binary file?)"
                ) from None
            if line.strip():
                return line.strip()
    return None


def _finish(
    name: str,
    cols: RequestColumns,
    duration: float,
    time_scale: float,
    rate_scale: float,
    seed: int,
    start_s: float | None,
    duration_s: float | None,
) -> Trace:
    cols = scale_rate(cols, rate_scale, duration, seed)
    cols.arrival_s = cols.arrival_s * time_scale
    duration *= time_scale
    start = start_s or 0.0
    if start >= duration and len(cols):
        raise ValueError(f"{name}: start {start:g} s is past the end of the trace ({duration:,.0f} s)")
    end = duration if duration_s is None else min(duration, start + duration_s)
    return Trace(name, end - start, _columns=cols.window(start, end))


def scale_rate(cols: RequestColumns, rate_scale: float, duration: float, seed: int) -> RequestColumns:
    if rate_scale == 1.0 or not len(cols):
        return cols
    expected = len(cols) * rate_scale
    if expected > MAX_CANDIDATES:  # --rate-scale 1e9 of a 600 s trace took 5.8 GB in 130 s, then a MemoryError
        raise ValueError(
            f"rate scale {rate_scale:g} would replay some {expected:.3g} requests ({len(cols):,} scaled); at most "
            f"{MAX_CANDIDATES:,} fit in memory (as many as a synthetic trace may hold)"
        )
    rng = np.random.default_rng([seed, 0x2A7E])
    whole = int(rate_scale)
    frac = rate_scale - whole
    mean_gap = duration / max(len(cols), 1)
    parts: list[RequestColumns] = []
    next_id = 1 + max((max(b) for b in cols.prefix_blocks if b and min(b) < _TEMPLATE_BASE), default=0)
    for copy in range(whole + (1 if frac > 0 else 0)):
        keep = np.ones(len(cols), dtype=bool) if copy < whole else rng.random(len(cols)) < frac
        jitter = np.zeros(int(keep.sum())) if copy == 0 else rng.uniform(-mean_gap, mean_gap, int(keep.sum()))
        arrivals = np.clip(cols.arrival_s[keep] + jitter, 0.0, duration)
        offset = copy * next_id
        blocks = [
            tuple(b if b >= _TEMPLATE_BASE else b + offset for b in blocks)
            for blocks, k in zip(cols.prefix_blocks, keep.tolist(), strict=True)
            if k
        ]
        parts.append(RequestColumns(arrivals, cols.prompt_tokens[keep], cols.output_tokens[keep], blocks))
    return RequestColumns(
        np.concatenate([p.arrival_s for p in parts]),
        np.concatenate([p.prompt_tokens for p in parts]),
        np.concatenate([p.output_tokens for p in parts]),
        [b for p in parts for b in p.prefix_blocks],
    ).sorted()


def _servegen(
    p: Path, time_scale: float, rate_scale: float, seed: int, start_s: float | None, duration_s: float | None
) -> Trace:
    source = ServeGenSource(read_servegen(p, seed=seed), time_scale=time_scale, rate_scale=rate_scale, seed=seed)
    start = start_s or 0.0
    if start >= source.duration_s:
        raise ValueError(f"{p}: start {start:g} s is past the end of the trace ({source.duration_s:,.0f} s)")
    span = source.duration_s - start if duration_s is None else min(duration_s, source.duration_s - start)
    return Trace(
        p.name,
        span,
        _sample=lambda a, b: source.sample(start + a, start + b),
        _rates=lambda step: source.rate_series(step, start, span),
    )
