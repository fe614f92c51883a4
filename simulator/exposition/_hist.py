"""Shared helper: a simulator Histogram as a prometheus_client HistogramMetricFamily sample set."""

from __future__ import annotations

from prometheus_client.core import HistogramMetricFamily

from simulator.histogram import Histogram


def _le(bound: float) -> str:
    return repr(float(bound))


def add(family: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    cum = h.cumulative()
    buckets = [(_le(b), float(c)) for b, c in zip(h.bounds, cum, strict=False)]
    buckets.append(("+Inf", float(cum[-1])))
    family.add_metric(labels, buckets, sum_value=h.total)
