"""A synthetic workload: a diurnal cycle with bursts, as a non-homogeneous Poisson process.

rate(t) = base · (1 + amplitude · sin(2π t / period − π/2)) · burst(t), where `bursts` windows multiply the rate
by `burst_factor` for `burst_s` seconds at seeded random times. Spec string for the CLI:
`synthetic:duration_s=3600,rate=5,amplitude=0.5,period_s=86400,bursts=3,burst_factor=4,burst_s=120`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from simulator.trace.model import MAX_SPAN_DAYS, MAX_SPAN_S, RequestColumns
from simulator.trace.prefixes import synthesize_prefixes

# The thinning draws every candidate arrival at once: `rate=1e12` asked numpy for 437 TiB (a MemoryError traceback).
MAX_CANDIDATES = 20_000_000  # a 400-day trace at 0.5 requests/s; some 1 GB of columns at the peak
MAX_BURSTS = 10_000  # each burst is a pass over the candidates


@dataclass(frozen=True)
class SyntheticSpec:
    duration_s: float = 3600.0
    rate: float = 5.0
    amplitude: float = 0.5
    period_s: float = 86400.0
    bursts: int = 3
    burst_factor: float = 4.0
    burst_s: float = 120.0
    prompt_mean: float = 1000.0
    output_mean: float = 250.0

    def __post_init__(self) -> None:
        values = [getattr(self, f.name) for f in fields(self)]
        if not all(math.isfinite(v) for v in values):  # `duration_s=inf`: an OverflowError traceback; nan passed
            raise ValueError("synthetic: every parameter must be a finite number")
        if self.duration_s > MAX_SPAN_S:
            raise ValueError(f"synthetic: duration_s above {MAX_SPAN_S:.0f} ({MAX_SPAN_DAYS} days), the longest trace")
        if self.duration_s <= 0 or self.rate < 0 or self.period_s <= 0 or self.burst_s <= 0:
            raise ValueError("synthetic: duration_s, period_s, burst_s must be > 0 and rate >= 0")
        if not 0 <= self.amplitude <= 1:
            raise ValueError(f"synthetic: amplitude must be in [0, 1], got {self.amplitude}")
        if self.bursts < 0 or self.burst_factor < 0:
            raise ValueError("synthetic: bursts and burst_factor must be >= 0")
        if self.bursts > MAX_BURSTS:
            raise ValueError(f"synthetic: bursts above {MAX_BURSTS}")
        if self.prompt_mean < 1 or self.output_mean < 1:
            raise ValueError("synthetic: mean lengths must be >= 1")
        candidates = self.peak_rate * self.duration_s
        if candidates > MAX_CANDIDATES:
            raise ValueError(
                f"synthetic: {candidates:.3g} arrivals at the peak rate (rate x (1 + amplitude) x burst_factor x "
                f"duration_s); at most {MAX_CANDIDATES:.0e}"
            )

    @property
    def peak_rate(self) -> float:
        """Requests per second at the crest of the cycle inside a burst: the rate candidates are drawn at."""
        return self.rate * (1 + self.amplitude) * max(1.0, self.burst_factor)

    @classmethod
    def parse(cls, spec: str) -> SyntheticSpec:
        """Parse `synthetic[:key=value,...]`, naming the bad key or value on error."""
        _, _, rest = spec.partition(":")
        known = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, float | int] = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, sep, value = item.partition("=")
            if not sep or key not in known:
                raise ValueError(f"synthetic: unknown parameter {key!r} (known: {', '.join(known)})")
            try:
                kwargs[key] = int(value) if key == "bursts" else float(value)
            except ValueError:
                raise ValueError(f"synthetic: {key}={value!r} is not a number") from None
        return cls(**kwargs)  # type: ignore[arg-type]


def generate(spec: SyntheticSpec, *, seed: int) -> RequestColumns:
    rng = np.random.default_rng([seed, 0x517])
    burst_starts = rng.uniform(0, spec.duration_s, spec.bursts)
    peak = spec.peak_rate
    # Thinning (Lewis & Shedler): candidates at the peak rate, kept with probability rate(t)/peak.
    n_cand = rng.poisson(peak * spec.duration_s)
    cand = np.sort(rng.uniform(0, spec.duration_s, n_cand))
    rate = spec.rate * (1 + spec.amplitude * np.sin(2 * math.pi * cand / spec.period_s - math.pi / 2))
    in_burst = np.zeros(n_cand, dtype=bool)
    for b in burst_starts:
        in_burst |= (cand >= b) & (cand < b + spec.burst_s)
    rate = np.where(in_burst, rate * spec.burst_factor, rate)
    keep = rng.random(n_cand) * peak < rate if peak > 0 else np.zeros(n_cand, dtype=bool)
    arrivals = cand[keep]
    n = len(arrivals)
    prompts = _lognormal(rng, spec.prompt_mean, 1.0, n, 32768)
    outputs = _lognormal(rng, spec.output_mean, 0.8, n, 4096)
    return RequestColumns(arrivals, prompts, outputs, synthesize_prefixes(prompts, seed=seed))


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int, cap: int) -> np.ndarray:
    mu = math.log(mean) - sigma * sigma / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, cap).astype(np.int64)
