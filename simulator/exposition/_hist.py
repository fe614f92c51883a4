"""Shared helper: a simulator Histogram as a prometheus_client HistogramMetricFamily sample set.

Latency histograms are binned on fine grids (simulator.histogram); pages show them on the engine's own bounds:
vLLM's by default (also used for SGLang), TGI's when asked.
"""

from __future__ import annotations

from prometheus_client.core import HistogramMetricFamily

from simulator.histogram import ITL_BUCKETS, ITL_GRID, LATENCY_GRID, REQUEST_LATENCY_BUCKETS, Histogram

_DEFAULT_BOUNDS = {LATENCY_GRID: REQUEST_LATENCY_BUCKETS, ITL_GRID: ITL_BUCKETS}


def _le(bound: float) -> str:
    return repr(float(bound))


def add(
    family: HistogramMetricFamily, labels: list[str], h: Histogram, bounds: tuple[float, ...] | None = None
) -> None:
    target = bounds if bounds is not None else _DEFAULT_BOUNDS.get(h.bounds)
    if target is not None and target != h.bounds:
        h = h.rebucket(target)
    cum = h.cumulative()
    buckets = [(_le(b), float(c)) for b, c in zip(h.bounds, cum, strict=False)]
    buckets.append(("+Inf", float(cum[-1])))
    family.add_metric(labels, buckets, sum_value=h.total)
