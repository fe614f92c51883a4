"""Impossible values become unknown: what an adapter read is checked before anything downstream sees it.

A page can carry values no engine or GPU can have: a negative queue, a negative counter, a KV usage of
3.2, NaN or infinity where a count is meant, 1e308 requests. Read as they are, they raise findings and
move the scaler (issue 11: a critical "KV cache 100 % full" from a doubled gauge). Each such value is
made ``None`` here, the same "unknown" an engine that does not export the field gets, so detectors and
the planner treat it as missing, never as a fact. The rest of the sample is kept.

Rules:

- counts, counters, token and byte totals: finite, >= 0 and at most 2**53, the largest integer a
  float64 holds exactly (a counter beyond it can no longer count by one, and no real one gets there);
- a counter's step: at most ``MAX_COUNTER_PER_S`` a second (checked where steps are taken,
  ``collector.rates.CounterWindow``: a reading past it is unknown until a second reading agrees with it), a TTFT or
  ITL histogram's count at most ``MAX_OBSERVATIONS_PER_S`` (``collector.state``: likewise, and a histogram that
  moved for good starts its windows again, as when its buckets change);
- fractions (KV usage, GPU utilisation, SM activity): within [0, 1] up to ``FRACTION_TOLERANCE``,
  clamped into [0, 1] when within it (an engine's ``1 - free/total`` can land a rounding step outside);
- KV capacity: as a count, and > 0;
- histograms: cumulative counts finite, >= 0 and non-decreasing over the bounds, the count likewise;
  a sum that is negative or infinite makes the histogram unknown (NaN already means "no sum");
- GPU temperature: finite only (a negative Celsius reading is physically possible).
"""

from __future__ import annotations

import math
import operator
from dataclasses import replace
from typing import Any

from collector.samples import GpuSample, Histogram, ReplicaSample

MAX_COUNT = float(2**53)
# The most a replica's counter can step by in a second: a million requests (finished, preempted), a billion tokens
# (prompt, generated, prefix-cache hits and queries). A step past it is a corrupted counter or a page that is not this
# replica's, not demand: ``collector.rates.CounterWindow`` holds such a reading unread until a second one agrees with
# it (collector.counter_rates.MAX_SERIES_RPS is the gateway's counterpart).
MAX_COUNTER_PER_S = {
    "requests_finished": 1e6,
    "preemptions": 1e6,
    "prompt_tokens": 1e9,
    "generation_tokens": 1e9,
    "prefix_hits": 1e9,
    "prefix_queries": 1e9,
}
# ... and the most a replica's latency histogram's count can: a million observations a second where each is a request
# (TTFT), a billion where each is a token (ITL); held likewise (``collector.state``), where the windows read them.
MAX_OBSERVATIONS_PER_S = {"ttft": 1e6, "itl": 1e9}
FRACTION_TOLERANCE = 0.01

_REPLICA_COUNTS = (
    "requests_waiting",
    "requests_running",
    "prefix_queries",
    "prefix_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
)
_REPLICA_HISTOGRAMS = ("ttft", "itl", "e2e", "queue_time")
_GPU_COUNTS = (
    "memory_used_bytes",
    "memory_free_bytes",
    "power_w",
    "xid_count",
    "ecc_dbe_volatile",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "pcie_replay",
)
_GPU_FRACTIONS = ("utilisation", "sm_active")
_gpu_counts = operator.attrgetter(*_GPU_COUNTS)
_gpu_fractions = operator.attrgetter(*_GPU_FRACTIONS)


def count(value: float | None) -> float | None:
    """A count or counter: None unless finite, >= 0 and at most 2**53."""
    if value is None or not 0 <= value <= MAX_COUNT:  # NaN fails the comparison too
        return None
    return value


def fraction(value: float | None) -> float | None:
    """A 0..1 ratio: clamped when within the tolerance, else None."""
    if value is None or not -FRACTION_TOLERANCE <= value <= 1 + FRACTION_TOLERANCE:
        return None
    return min(1.0, max(0.0, value))


def histogram(h: Histogram | None) -> Histogram | None:
    """A cumulative histogram, or None when its counts cannot be."""
    if h is None:
        return None
    previous = 0.0
    for c in h.counts:
        if not previous <= c <= MAX_COUNT:
            return None
        previous = c
    if count(h.count) is None or h.sum < 0 or math.isinf(h.sum):
        return None
    return h


def replica(sample: ReplicaSample) -> ReplicaSample:
    """The sample with every impossible value made None (the same object when all are possible)."""
    changes: dict[str, Any] = {}
    for name in _REPLICA_COUNTS:
        value = getattr(sample, name)
        if value is not None and not 0 <= value <= MAX_COUNT:  # count(value) is None, without a call per field
            changes[name] = None
    kv = sample.kv_usage
    if kv is not None:
        checked = fraction(kv)
        if checked != kv:
            changes["kv_usage"] = checked
    capacity = sample.kv_capacity_tokens
    if capacity is not None and (count(capacity) is None or capacity == 0):
        changes["kv_capacity_tokens"] = None
    for name in _REPLICA_HISTOGRAMS:
        h = getattr(sample, name)
        if h is not None and histogram(h) is None:
            changes[name] = None
    return replace(sample, **changes) if changes else sample


def gpu(sample: GpuSample) -> GpuSample:
    """The GPU sample with every impossible value made None (the same object when all are possible)."""
    # Every value possible (the rule for nearly every sample): the sample as it is, told apart in one pass without
    # building the changes. A fraction within [0, 1] is its own fraction(); any other is changed by it.
    for value in _gpu_counts(sample):
        if value is not None and not 0.0 <= value <= MAX_COUNT:
            return _gpu_checked(sample)
    for value in _gpu_fractions(sample):
        if value is not None and not 0.0 <= value <= 1.0:
            return _gpu_checked(sample)
    temperature = sample.temperature_c
    if temperature is not None and not math.isfinite(temperature):
        return _gpu_checked(sample)
    return sample


def _gpu_checked(sample: GpuSample) -> GpuSample:
    changes: dict[str, Any] = {}
    for name in _GPU_COUNTS:
        value = getattr(sample, name)
        if value is not None and not 0 <= value <= MAX_COUNT:  # count(value) is None, without a call per field
            changes[name] = None
    for name in _GPU_FRACTIONS:
        value = getattr(sample, name)
        if value is not None:
            checked = fraction(value)
            if checked != value:
                changes[name] = checked
    temperature = sample.temperature_c
    if temperature is not None and not math.isfinite(temperature):
        changes["temperature_c"] = None
    return replace(sample, **changes) if changes else sample
