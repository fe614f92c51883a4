"""The shared reading primitives: series specs and histogram merging."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.engines._read import Series, merge_histograms, read_histogram, scale_histogram
from collector.exposition import parse
from collector.samples import Histogram

INF = math.inf


@pytest.mark.parametrize(
    ("spec", "family", "match"),
    [
        # plain family name
        ("vllm:num_requests_running", "vllm:num_requests_running", {}),
        # category label selection as the TensorRT-LLM mapping writes it
        ("nv_trt_llm_request_metrics{request_type=waiting}", "nv_trt_llm_request_metrics", {"request_type": "waiting"}),
        # several labels, spaces tolerated
        ("f{a=1, b=2}", "f", {"a": "1", "b": "2"}),
    ],
)
def test_series_parse(spec: str, family: str, match: dict[str, str]) -> None:
    s = Series.parse(spec)
    assert (s.family, dict(s.match)) == (family, match)


@pytest.mark.parametrize("spec", ["f{a=1", "f{a}"])
def test_series_parse_rejects_malformed_specs(spec: str) -> None:
    with pytest.raises(ValueError, match="series spec"):
        Series.parse(spec)


def test_merge_keeps_only_shared_bounds() -> None:
    a = Histogram((0.1, 0.5, INF), (1, 3, 4), 1.0, 4)
    b = Histogram((0.1, 1.0, INF), (2, 5, 6), 2.0, 6)
    merged = merge_histograms([a, b])
    # 0.5 and 1.0 exist in one part only: their cumulative sums would be wrong, so they are dropped
    assert merged == Histogram((0.1, INF), (3, 10), 3.0, 10)


def test_histogram_without_buckets_keeps_count_as_inf_bucket() -> None:
    page = "# TYPE h histogram\nh_sum 2.5\nh_count 4\n"
    assert read_histogram(parse(page), [Series("h")]) == Histogram((INF,), (4.0,), 2.5, 4.0)


def test_histogram_bounds_sorted_from_an_unsorted_page() -> None:
    page = '# TYPE h histogram\nh_bucket{le="+Inf"} 3\nh_bucket{le="2"} 2\nh_bucket{le="0.5"} 1\nh_sum 2\nh_count 3\n'
    h = read_histogram(parse(page), [Series("h")])
    assert h is not None
    assert h.bounds == (0.5, 2.0, INF)
    assert h.counts == (1.0, 2.0, 3.0)


def test_scale_changes_bounds_and_sum_not_counts() -> None:
    h = scale_histogram(Histogram((100.0, INF), (1, 2), 300.0, 2), 1e-3)
    assert (h.bounds, h.counts, h.sum) == ((0.1, INF), (1, 2), 0.3)


_cumulative = st.lists(st.integers(0, 1000), min_size=1, max_size=6).map(
    lambda xs: [sum(xs[: i + 1]) for i in range(len(xs))]
)


@given(st.lists(_cumulative, min_size=1, max_size=4))
def test_merged_inf_bucket_is_the_sum_of_the_parts(parts_counts: list[list[int]]) -> None:
    parts = [
        Histogram(tuple([float(i) for i in range(len(c) - 1)] + [INF]), tuple(float(x) for x in c), 0.0, float(c[-1]))
        for c in parts_counts
    ]
    merged = merge_histograms(parts)
    assert merged is not None
    assert merged.counts[-1] == sum(c[-1] for c in parts_counts)
    assert list(merged.counts) == sorted(merged.counts)  # still cumulative
