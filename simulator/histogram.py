"""Cumulative-bucket histograms with the bucket bounds the engines use (see ../shared/ENGINES.md)."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


# TGI (router/src/server.rs): 35 geometric duration buckets, 0.0001 · 1.5^k seconds.
TGI_DURATION_BUCKETS = tuple(0.0001 * 1.5**k for k in range(35))

# The simulator bins once, on the union of every engine's bounds, so that each engine's page is an exact
# re-bucketing (`Histogram.rebucket`) rather than an interpolation.
LATENCY_GRID = tuple(sorted(set(REQUEST_LATENCY_BUCKETS) | set(TGI_DURATION_BUCKETS)))
ITL_GRID = tuple(sorted(set(ITL_BUCKETS) | set(TGI_DURATION_BUCKETS)))


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_model_len (`build_1_2_5_buckets`)."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exponent
            if v > max_model_len:
                return tuple(out)
            out.append(float(v))
        exponent += 1


@dataclass
class Histogram:
    """Per-bucket (not cumulative) counts; `+Inf` is the last slot."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.total += value * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        out, acc = [], 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total)

    def rebucket(self, bounds: tuple[float, ...]) -> Histogram:
        """The same observations on coarser `bounds`, each of which must be one of ours (exact, no interpolation)."""
        index = {b: i for i, b in enumerate(self.bounds)}
        missing = [b for b in bounds if b not in index]
        if missing:
            raise ValueError(f"cannot re-bucket exactly: bounds {missing[:3]} are not on this histogram's grid")
        cum = self.cumulative()
        counts: list[int] = []
        previous = 0
        for b in bounds:
            counts.append(cum[index[b]] - previous)
            previous = cum[index[b]]
        counts.append(cum[-1] - previous)
        return Histogram(bounds, counts, self.total)
