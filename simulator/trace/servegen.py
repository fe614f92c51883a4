"""ServeGen per-client windows (Alibaba, arXiv 2505.09999): a directory of `chunk-<client>-trace.csv`.

Each file has no header and one row per 600 s window:
`window_start_s, rate_req_per_s, cv_of_interarrival, iat_distribution, arg1, arg2`, where the distribution is
`Gamma` (arg1 = shape, arg2 = scale: shape·scale = 1/rate in the data), `Weibull` (arg1 = shape c,
arg2 = scale, as scipy's `weibull_min`), `Exponential`, or empty (no arrivals). There are no per-request
timestamps, so — like ServeGen's own generator — we sample arrivals inside each window from its fitted
inter-arrival distribution. The fitted Weibull means deviate from 1/rate (heavy tails fit loosely), so gaps
are rescaled to the window's mean 1/rate: the shape (burstiness) comes from the fit, the volume from the rate.

The copy in ../shared holds no token lengths: lengths are drawn from log-normals whose means vary per client
(deterministic for the seed) around PROMPT_MEAN_TOKENS / OUTPUT_MEAN_TOKENS, an assumption documented in
docs/simulator.md. Rates are large (~100k requests per 10 minutes): use rate_scale or the fluid level.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from simulator.trace.model import MAX_SPAN_DAYS, MAX_SPAN_S, RateSeries, RequestColumns, text_lines
from simulator.trace.prefixes import synthesize_prefixes

WINDOW_S = 600.0
PROMPT_MEAN_TOKENS = 2000.0
OUTPUT_MEAN_TOKENS = 300.0
_PROMPT_SIGMA = 1.0
_OUTPUT_SIGMA = 0.8
_CLIENT_SPREAD_SIGMA = 0.5
_MIN_SHAPE = 0.05
_FILE_RE = re.compile(r"chunk-(\d+)-trace\.csv")
_DISTS = {"": 0, "Exponential": 1, "Gamma": 2, "Weibull": 3}
# One client's rate in one window above this is a corrupt row (the published days peak at 465 requests/s): 1e300 was
# replayed at the fluid level into a p50 TTFT of 2e299 s, and sampling it request by request cannot end.
MAX_WINDOW_RATE = 1e5
# The windows are held as (client, window) matrices, 32 bytes a cell: a client file of many windows and thousands of
# one-row files would fill the machine's memory from a few hundred kilobytes of input. The published days are 162
# clients × 1,440 windows (233,280 cells); this allows 40 times that and stays within 320 MB.
MAX_CELLS = 10_000_000


@dataclass
class ServeGenWindows:
    """All clients' windows as (client, window) matrices, in trace time (before scaling)."""

    clients: list[int]
    starts_s: NDArray[np.float64]  # (windows,)
    rate: NDArray[np.float64]  # (clients, windows)
    dist: NDArray[np.int64]
    arg1: NDArray[np.float64]
    arg2: NDArray[np.float64]
    prompt_mean: NDArray[np.float64]  # (clients,)
    output_mean: NDArray[np.float64]


def read_servegen(directory: Path, *, seed: int) -> ServeGenWindows:
    files = sorted(
        ((int(m.group(1)), p) for p in directory.iterdir() if (m := _FILE_RE.fullmatch(p.name))),
    )
    if not files:
        # A folder of one's own traces (a file a day, say) is no trace: each file is replayed by its own path.
        inside = sorted(p.name for p in directory.iterdir() if p.suffix in (".csv", ".jsonl", ".json") and p.is_file())
        hint = "".join(
            f"; a trace file is given by its own path, e.g. {directory / name} (one file a replay)"
            for name in inside[:1]
        )
        raise ValueError(f"{directory}: no chunk-<N>-trace.csv files (not a ServeGen directory){hint}")
    per_client: list[list[tuple[float, float, int, float, float]]] = []
    for _, path in files:
        if not path.is_file():  # a directory was an IsADirectoryError traceback; a FIFO would be waited on for good
            raise ValueError(f"{path}: not a regular file")
        rows: list[tuple[float, float, int, float, float]] = []
        with path.open(encoding="utf-8-sig") as f:  # a BOM, as the request-level loaders allow
            for lineno, line in enumerate(text_lines(path, f), start=1):
                if not line.strip():
                    continue
                rows.append(_window_row(path, lineno, line, len(rows)))
                if len(files) * len(rows) > MAX_CELLS:  # while reading: so are the rows held
                    raise ValueError(
                        f"{path}:{lineno}: {len(files):,} clients × {len(rows):,} windows is more than "
                        f"{MAX_CELLS:,} (client, window) pairs; cut the trace to the days you replay"
                    )
        per_client.append(rows)
    n_windows = max(len(r) for r in per_client)
    if n_windows == 0:
        raise ValueError(f"{directory}: no windows (every chunk-<N>-trace.csv file is empty)")
    # ServeGen writes every window of every client, an idle one as a row of zeros: a file with fewer rows was cut
    # short (an interrupted copy, a full disk). Its missing windows were read as no arrivals: the published days with
    # their busiest client cut to 5 days replayed day 6 h0-6 with 35 % fewer requests, without a word.
    longest = max(range(len(files)), key=lambda c: len(per_client[c]))
    for (_, path), rows in zip(files, per_client, strict=True):
        if len(rows) < n_windows:
            raise ValueError(
                f"{path}: {len(rows):,} windows where {files[longest][1].name} has {n_windows:,}: a file cut short "
                "(an interrupted copy?); ServeGen writes every window of every client, an idle one as a row of zeros"
            )
    starts = np.arange(n_windows, dtype=np.float64) * WINDOW_S
    shape = (len(files), n_windows)
    rate: NDArray[np.float64] = np.zeros(shape)
    arg1: NDArray[np.float64] = np.zeros(shape)
    arg2: NDArray[np.float64] = np.zeros(shape)
    dist = np.zeros(shape, dtype=np.int64)
    for c, rows in enumerate(per_client):
        for w, (_, r, d, a1, a2) in enumerate(rows):
            rate[c, w], dist[c, w], arg1[c, w], arg2[c, w] = r, d, a1, a2
    rng = np.random.default_rng([seed, 0x5E2])
    prompt_mean = PROMPT_MEAN_TOKENS * np.exp(rng.normal(0.0, _CLIENT_SPREAD_SIGMA, len(files)))
    output_mean = OUTPUT_MEAN_TOKENS * np.exp(rng.normal(0.0, _CLIENT_SPREAD_SIGMA, len(files)))
    return ServeGenWindows([c for c, _ in files], starts, rate, dist, arg1, arg2, prompt_mean, output_mean)


def _window_row(path: Path, lineno: int, line: str, window: int) -> tuple[float, float, int, float, float]:
    """One window's row, the file's ``window``-th: ValueError naming the file and line where it cannot be read."""
    parts = line.split(",")
    try:
        if len(parts) != 6:
            raise ValueError(f"expected 6 fields, got {len(parts)}")
        start, r_win = float(parts[0]), float(parts[1])
        name = parts[3].strip()
        if name not in _DISTS:
            raise ValueError(f"unknown inter-arrival distribution {name!r}")
        a1, a2 = float(parts[4]), float(parts[5])
        if not (math.isfinite(start) and math.isfinite(r_win)) or r_win < 0:
            raise ValueError("window start and rate must be finite, rate >= 0")
        if start >= MAX_SPAN_S:  # as every request-level trace
            raise ValueError(f"window start past {MAX_SPAN_DAYS} days, the longest trace (a corrupt row?)")
        if abs(start - window * WINDOW_S) > 1e-6:  # here, not after the whole file: a bound on the rows kept
            raise ValueError(f"window {window} starts at {start}, expected {window * WINDOW_S}")
        if r_win > MAX_WINDOW_RATE:
            raise ValueError(f"rate above {MAX_WINDOW_RATE:.0e} requests/s")
        if r_win > 0 and _DISTS[name] >= 2 and not (0 < a1 < math.inf and 0 < a2 < math.inf):
            raise ValueError(f"{name} parameters must be finite and > 0")
    except ValueError as e:
        raise ValueError(f"{path}:{lineno}: {e}: {line[:200]!r}") from None
    return start, r_win, _DISTS[name], a1, a2


class ServeGenSource:
    """Samples requests and computes exact expected rates for a scaled view of the windows."""

    def __init__(self, windows: ServeGenWindows, *, time_scale: float, rate_scale: float, seed: int) -> None:
        self.w = windows
        self.time_scale = time_scale
        self.rate_scale = rate_scale
        self.seed = seed
        self.window_s = WINDOW_S * time_scale

    @property
    def duration_s(self) -> float:
        return len(self.w.starts_s) * self.window_s

    def rate_series(self, step_s: float, start_s: float = 0.0, duration_s: float | None = None) -> RateSeries:
        if step_s <= 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        total_rate = self.w.rate.sum(axis=0) * self.rate_scale / self.time_scale  # req/s per window
        p_w = _weighted(self.w.rate, self.w.prompt_mean)
        o_w = _weighted(self.w.rate, self.w.output_mean)
        span = self.duration_s - start_s if duration_s is None else duration_s
        n = max(1, math.ceil(span / step_s))
        times = np.arange(n, dtype=np.float64) * step_s
        # Average the piecewise-constant window rate over each step (steps may straddle windows).
        edges = np.concatenate([times, [n * step_s]]) + start_s
        cum = np.concatenate([[0.0], np.cumsum(total_rate * self.window_s)])
        counts = np.diff(_integrate(edges, cum, self.window_s))
        widx = np.minimum((edges[:-1] // self.window_s).astype(np.int64), len(total_rate) - 1)
        return RateSeries(times, counts / step_s, p_w[widx], o_w[widx])

    def sample(self, start_s: float, end_s: float) -> RequestColumns:
        first = int(start_s // self.window_s)
        last = math.ceil(end_s / self.window_s)
        arrivals: list[NDArray[np.float64]] = []
        prompts: list[NDArray[np.int64]] = []
        outputs: list[NDArray[np.int64]] = []
        for w in range(max(first, 0), min(last, len(self.w.starts_s))):
            for c in range(len(self.w.clients)):
                a = self._arrivals(c, w)
                if not len(a):
                    continue
                a = a[(a >= start_s) & (a < end_s)]
                rng = np.random.default_rng([self.seed, c, w, 2])
                arrivals.append(a - start_s)
                prompts.append(_lognormal_ints(rng, self.w.prompt_mean[c], _PROMPT_SIGMA, len(a), 32768))
                outputs.append(_lognormal_ints(rng, self.w.output_mean[c], _OUTPUT_SIGMA, len(a), 4096))
        if not arrivals:
            empty_f, empty_i = np.zeros(0), np.zeros(0, dtype=np.int64)
            return RequestColumns(empty_f, empty_i, empty_i.copy(), [])
        a_all = np.concatenate(arrivals)
        cols = RequestColumns(a_all, np.concatenate(prompts), np.concatenate(outputs), [()] * len(a_all)).sorted()
        cols.prefix_blocks = synthesize_prefixes(cols.prompt_tokens, seed=self.seed)
        return cols

    def _arrivals(self, c: int, w: int) -> NDArray[np.float64]:
        rate = self.w.rate[c, w] * self.rate_scale / self.time_scale
        d = int(self.w.dist[c, w])
        if rate <= 0 or d == 0:
            return np.zeros(0)
        rng = np.random.default_rng([self.seed, c, w, 1])
        mean_gap = 1.0 / rate
        n = int(rate * self.window_s * 1.3) + 16
        a1, a2 = max(self.w.arg1[c, w], _MIN_SHAPE), self.w.arg2[c, w]
        if d == 2:
            gaps = rng.gamma(a1, 1.0, n)
            dist_mean = a1
        elif d == 3:
            gaps = rng.weibull(a1, n)
            dist_mean = math.gamma(1.0 + 1.0 / a1)
        else:
            gaps = rng.exponential(1.0, n)
            dist_mean = 1.0
        del a2  # the scale only sets the mean, which the window rate fixes
        gaps *= mean_gap / dist_mean
        t0 = w * self.window_s
        # Start at a random phase of the first gap, so windows do not all begin with an arrival.
        times: NDArray[np.float64] = t0 + rng.random() * gaps[0] + np.cumsum(gaps) - gaps[0]
        while times[-1] < t0 + self.window_s:  # rare: the sampled gaps ran short of the window
            more = rng.exponential(mean_gap, n)
            times = np.concatenate([times, times[-1] + np.cumsum(more)])
        kept: NDArray[np.float64] = times[times < t0 + self.window_s]
        return kept


def _weighted(rate: NDArray[np.float64], per_client: NDArray[np.float64]) -> NDArray[np.float64]:
    total = rate.sum(axis=0)
    weighted = (rate * per_client[:, None]).sum(axis=0)
    fallback = float(per_client.mean())
    out: NDArray[np.float64] = np.divide(weighted, total, out=np.full(total.shape, fallback), where=total > 0)
    return out


def _integrate(edges: NDArray[np.float64], cum: NDArray[np.float64], window_s: float) -> NDArray[np.float64]:
    """Cumulative expected arrivals at each edge from per-window cumulative counts (linear inside windows)."""
    pos = np.clip(edges / window_s, 0.0, len(cum) - 1)
    out: NDArray[np.float64] = np.interp(pos, np.arange(len(cum), dtype=np.float64), cum)
    return out


def _lognormal_ints(rng: np.random.Generator, mean: float, sigma: float, n: int, cap: int) -> NDArray[np.int64]:
    mu = math.log(mean) - sigma * sigma / 2.0
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, cap).astype(np.int64)
