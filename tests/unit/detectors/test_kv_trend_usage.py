"""The KV trend reads each usage as `collector.validity.fraction` reads it, exactly, though it calls it only for
usages outside (0, 1): clamped within the tolerance, unknown beyond it, -0.0 read as 0.0."""

from __future__ import annotations

import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.samples import ReplicaSample
from collector.validity import fraction
from detectors.kv_trend import fit_trend

EDGES = [None, 0.0, -0.0, 1.0, 0, 1, 1.005, -0.005, 1.2, -0.3, math.nan, math.inf, -math.inf, 5e-324, 1 - 2**-53]


def _fit_with_fraction_everywhere(history: list[ReplicaSample], window_s: float, min_samples: int) -> object:
    """`fit_trend` as it read usages before: `fraction` called on every one."""
    start = history[-1].timestamp - window_s
    pts = [(s.timestamp, v) for s in history if s.timestamp >= start and (v := fraction(s.kv_usage)) is not None]
    if len(pts) < min_samples:
        return None
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(pts) for t2, v2 in pts[i + 1 :] if t2 > t1]
    if not slopes:
        return None
    slope = statistics.median(slopes)
    return slope, statistics.median(v + slope * (pts[-1][0] - t) for t, v in pts)


@settings(max_examples=200, deadline=None)
@given(usages=st.lists(st.one_of(st.sampled_from(EDGES), st.floats(-0.02, 1.02)), min_size=1, max_size=16))
def test_fit_trend_reads_usages_as_fraction_does(usages: list[float | None]) -> None:
    history = [
        ReplicaSample(
            namespace="p",
            deployment="d",
            replica="r",
            node="n",
            engine="vllm",
            model="m",
            timestamp=5.0 * i,
            kv_usage=u,
        )
        for i, u in enumerate(usages)
    ]
    got = fit_trend(history, 60.0, 2)
    assert repr(got) == repr(_fit_with_fraction_everywhere(history, 60.0, 2))  # repr: -0.0 apart from 0.0
