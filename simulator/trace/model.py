"""The trace every loader produces: request arrivals with token counts and prefix blocks, plus a rate series.

Requests are held column-wise (numpy arrays) because the 10 ServeGen days carry ~10^8 requests: the fluid
level reads only `rate_series`, and the request level materialises `Request` objects for the span it replays.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
from numpy.typing import NDArray

# Mooncake's hash ids name 512-token blocks; synthesized prefixes use the same granularity so that every
# loader feeds the prefix cache the same unit.
PREFIX_BLOCK_TOKENS = 512

# A token count above this is a corrupt row, not a prompt (and would overflow the int64 columns).
MAX_TOKENS = 10**9


def check_tokens(prompt: int, output: int) -> None:
    """A request row's token counts, as every loader accepts them: ValueError for a negative or corrupt count."""
    if prompt < 0 or output < 0:
        raise ValueError("negative token count")
    if max(prompt, output) > MAX_TOKENS:
        raise ValueError(f"token count above {MAX_TOKENS:.0e}")


# A trace spanning more than this holds a corrupt timestamp (a year typed 2999, a BurstGPT second count in ms): its
# rate series alone, a float per 10 s bin, took 21 GB for 975 years, and the replay would tick for days.
MAX_SPAN_DAYS = 400
MAX_SPAN_S = MAX_SPAN_DAYS * 86_400.0


class SpanCheck:
    """The earliest and latest arrival read so far, with their lines: ``add`` raises ValueError naming the other
    line when a row stretches the trace past ``MAX_SPAN_S`` (loaders add the file and this row's line)."""

    __slots__ = ("first", "first_line", "last", "last_line")

    def __init__(self) -> None:
        self.first = self.last = math.nan
        self.first_line = self.last_line = 0

    def add(self, t: float, line: int) -> None:
        if not t >= self.first:  # also the first row (nan)
            self.first, self.first_line = t, line
        if not t <= self.last:
            self.last, self.last_line = t, line
        if self.last - self.first > MAX_SPAN_S:
            other = self.first_line if line == self.last_line else self.last_line
            days = (self.last - self.first) / 86_400.0
            shown = f"{days:,.0f}" if days < 1e9 else f"{days:.1e}"
            raise ValueError(
                f"timestamp is {shown} days from line {other}'s; a trace spans at most {MAX_SPAN_DAYS} days "
                "(a corrupt timestamp?)"
            )


# A request row is some dozens of characters (a Mooncake row with a long prompt's hash ids some kilobytes); a longer
# line is a corrupt or sparse file, refused before it is read whole: a header followed by 400 MB of NULs (a file
# `truncate`d to size) took 850 MB to refuse, and 20 GB of them would take the machine's memory.
MAX_LINE = 1 << 20


def text_lines(path: Path, f: TextIO) -> Iterator[str]:
    """The lines of ``f`` (``path`` opened as UTF-8 text), each read at most ``MAX_LINE`` characters at a time:
    ValueError naming the file and line for a longer line, or for bytes that are not UTF-8 (the decoder fails a chunk
    ahead of the line it is read for: the line is found again in the raw bytes)."""
    lineno = 0
    while True:
        try:
            line = f.readline(MAX_LINE + 1)
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}:{_first_bad_utf8_line(path)}: not UTF-8 text ({e.reason}; a compressed or binary file?)"
            ) from None
        if not line:
            return
        lineno += 1
        if len(line) > MAX_LINE:
            raise ValueError(f"{path}:{lineno}: a line longer than {MAX_LINE} characters (a corrupt or sparse file?)")
        yield line


def _first_bad_utf8_line(path: Path) -> int:
    with path.open("rb") as f:
        lineno = 0
        while raw := f.readline(4 * MAX_LINE + 4):
            lineno += 1
            try:
                raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError:
                return lineno
    return lineno


# Refuse to materialise more request objects than this (about 1 GB of Python objects): use the fluid level.
MAX_MATERIALISED_REQUESTS = 5_000_000


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace. `prefix_blocks` names the prompt's full 512-token blocks, in order; two
    requests share a KV prefix exactly as long as their leading ids agree."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()


@dataclass(frozen=True)
class RateSeries:
    """Per-step arrival rate and mean lengths: what the fluid level consumes."""

    times_s: NDArray[np.float64]
    req_per_s: NDArray[np.float64]
    mean_prompt_tokens: NDArray[np.float64]
    mean_output_tokens: NDArray[np.float64]

    def __iter__(self):  # type: ignore[no-untyped-def]
        # Lets callers write `times, rate, prompt, output = trace.rate_series(10)`.
        return iter((self.times_s, self.req_per_s, self.mean_prompt_tokens, self.mean_output_tokens))


@dataclass
class RequestColumns:
    """Column-wise requests, sorted by arrival."""

    arrival_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    prefix_blocks: list[tuple[int, ...]]

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.prompt_tokens) == len(self.output_tokens) == len(self.prefix_blocks) == n):
            raise ValueError("request columns differ in length")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def sorted(self) -> RequestColumns:
        order = np.argsort(self.arrival_s, kind="stable")
        return RequestColumns(
            self.arrival_s[order],
            self.prompt_tokens[order],
            self.output_tokens[order],
            [self.prefix_blocks[i] for i in order],
        )

    def window(self, start_s: float, end_s: float) -> RequestColumns:
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        return RequestColumns(
            self.arrival_s[lo:hi] - start_s,
            self.prompt_tokens[lo:hi],
            self.output_tokens[lo:hi],
            self.prefix_blocks[lo:hi],
        )


def rate_series_from_columns(cols: RequestColumns, duration_s: float, step_s: float) -> RateSeries:
    """Bin arrivals into steps of `step_s`; mean lengths carry over empty steps (last seen, else overall)."""
    if step_s <= 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    n_steps = max(1, int(np.ceil(duration_s / step_s)))
    times = np.arange(n_steps, dtype=np.float64) * step_s
    idx = np.minimum((cols.arrival_s // step_s).astype(np.int64), n_steps - 1)
    counts = np.bincount(idx, minlength=n_steps).astype(np.float64)
    psum = np.bincount(idx, weights=cols.prompt_tokens.astype(np.float64), minlength=n_steps)
    osum = np.bincount(idx, weights=cols.output_tokens.astype(np.float64), minlength=n_steps)
    overall_p = float(cols.prompt_tokens.mean()) if len(cols) else 0.0
    overall_o = float(cols.output_tokens.mean()) if len(cols) else 0.0
    mean_p = _carry_forward(np.divide(psum, counts, out=np.full(n_steps, np.nan), where=counts > 0), overall_p)
    mean_o = _carry_forward(np.divide(osum, counts, out=np.full(n_steps, np.nan), where=counts > 0), overall_o)
    return RateSeries(times, counts / step_s, mean_p, mean_o)


def _carry_forward(values: NDArray[np.float64], default: float) -> NDArray[np.float64]:
    out = values.copy()
    last = default
    for i, v in enumerate(out):
        if np.isnan(v):
            out[i] = last
        else:
            last = float(v)
    return out


@dataclass
class Trace:
    """A replayable workload. Times are seconds since the trace start (after time scaling)."""

    name: str
    duration_s: float
    _columns: RequestColumns | None = None
    # Lazy sources (ServeGen): build columns for [start, end) and an exact rate series without sampling.
    _sample: Callable[[float, float], RequestColumns] | None = None
    _rates: Callable[[float], RateSeries] | None = None
    _requests: list[Request] | None = field(default=None, repr=False)

    @property
    def columns(self) -> RequestColumns:
        if self._columns is None:
            if self._sample is None:
                raise ValueError(f"trace {self.name!r} has neither requests nor a sampler")
            self._refuse_if_too_many(self.expected_requests())
            self._columns = self._sample(0.0, self.duration_s)
        return self._columns

    @property
    def requests(self) -> Sequence[Request]:
        if self._requests is None:
            cols = self.columns
            self._refuse_if_too_many(len(cols))
            self._requests = [
                Request(float(a), int(p), int(o), b)
                for a, p, o, b in zip(
                    cols.arrival_s.tolist(),
                    cols.prompt_tokens.tolist(),
                    cols.output_tokens.tolist(),
                    cols.prefix_blocks,
                    strict=True,
                )
            ]
        return self._requests

    def sample_columns(self, start_s: float, end_s: float) -> RequestColumns:
        """The requests arriving in [start_s, end_s), times relative to start_s; lazy traces (ServeGen) sample
        only that span."""
        if self._columns is None and self._sample is not None:
            cols = self._sample(start_s, end_s)
            return RequestColumns(cols.arrival_s, cols.prompt_tokens, cols.output_tokens, cols.prefix_blocks)
        return self.columns.window(start_s, end_s)

    @classmethod
    def from_columns(cls, name: str, duration_s: float, columns: RequestColumns) -> Trace:
        """A trace over requests built elsewhere (a backtest's resampled mix, a test's handful)."""
        return cls(name, duration_s, _columns=columns.sorted())

    def _refuse_if_too_many(self, n: float) -> None:
        if n > MAX_MATERIALISED_REQUESTS:
            raise ValueError(
                f"trace {self.name!r} holds {n:,.0f} requests: too many for the request level; "
                "pass duration_s or rate_scale < 1, or use fidelity='fluid'"
            )

    def rate_series(self, step_s: float) -> RateSeries:
        """(times, req_per_s, mean prompt tokens, mean output tokens) per step, for the fluid level."""
        if self._rates is not None:
            return self._rates(step_s)
        return rate_series_from_columns(self.columns, self.duration_s, step_s)

    def prefix_reuse_share(self, replicas: int = 1, cache_blocks: int | None = None) -> float | None:
        """Share of prompt tokens whose leading prefix blocks are still cached on the replica a request reaches,
        requests being dealt round-robin to `replicas` replicas, each with an LRU cache of `cache_blocks` prefix
        blocks (None: unbounded; 1 replica, unbounded: the trace's own reuse). None for rates-only traces."""
        if self._columns is None:
            return None
        if replicas < 1 or (cache_blocks is not None and cache_blocks < 1):
            raise ValueError(f"need replicas >= 1 and cache_blocks >= 1, got {replicas}, {cache_blocks}")
        seen: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(replicas)]
        reused = total = 0
        rows = zip(self._columns.prompt_tokens.tolist(), self._columns.prefix_blocks, strict=True)
        for i, (prompt, blocks) in enumerate(rows):
            cache = seen[i % replicas]
            full = blocks[: prompt // PREFIX_BLOCK_TOKENS]
            hit = 0
            for b in full:
                if b not in cache:
                    break
                hit += 1
            reused += min(hit * PREFIX_BLOCK_TOKENS, prompt - 1)
            total += prompt
            for b in full:
                cache[b] = None
                cache.move_to_end(b)
            while cache_blocks is not None and len(cache) > cache_blocks:
                cache.popitem(last=False)
        return reused / total if total else 0.0

    def expected_requests(self) -> float:
        """Expected request count without materialising requests (exact for request-based traces)."""
        if self._columns is not None:
            return float(len(self._columns))
        if self._rates is None:
            return float(len(self.columns))
        rs = self._rates(60.0)
        return float(rs.req_per_s.sum() * 60.0)
