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


@pytest.mark.parametrize(
    "page",
    [
        "h_sum 2.5\nh_count 4\n",  # no TYPE line (grep -v '^#'): the parser makes it a summary without quantiles
        "# TYPE h summary\nh_sum 2.5\nh_count 4\n",
    ],
)
def test_a_histogram_without_buckets_is_read_where_it_reads_as_a_quantile_less_summary(page: str) -> None:
    # a vLLM page served its histograms as _count and _sum only (index 52461312685); stripped of its comment lines
    # it read no TTFT, ITL or E2E although the typed page does
    assert read_histogram(parse(page), [Series("h")]) == Histogram((INF,), (4.0,), 2.5, 4.0)


def test_a_summary_with_quantiles_is_no_histogram() -> None:
    page = '# TYPE h summary\nh{quantile="0.5"} 0.4\nh_sum 2.5\nh_count 4\n'
    assert read_histogram(parse(page), [Series("h")]) is None


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


# Two engines of one pod (summed, or averaged for KV usage), a current and an older name for KV usage, and a
# histogram whose +Inf bucket is missing on the older name; values are filled in per case below.
_TWO_SOURCES = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {w0}
vllm:num_requests_waiting{{engine="1",model_name="m"}} {w1}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv0}
vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {kv1}
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{{engine="0",model_name="m"}} {old_kv}
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{engine="0",model_name="m",le="0.1"}} {b0}
vllm:inter_token_latency_seconds_bucket{{engine="0",model_name="m",le="+Inf"}} {b1}
vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} 3.5
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {b1}
"""


@pytest.mark.parametrize(
    ("values", "kv_usage"),
    [
        # every value finite: the current names, summed and averaged over the engines
        ({"w0": 1, "w1": 2, "kv0": 0.5, "kv1": 0.25, "old_kv": 0.9, "b0": 4, "b1": 9}, 0.375),
        # the current KV name NaN on one engine: the mean of the finite one
        ({"w0": 1, "w1": 2, "kv0": "NaN", "kv1": 0.25, "old_kv": 0.9, "b0": 4, "b1": 9}, 0.25),
        # the current KV name NaN on both: the older name's value (mapping order, first with a finite value)
        ({"w0": 1, "w1": 2, "kv0": "NaN", "kv1": "NaN", "old_kv": 0.9, "b0": 4, "b1": 9}, 0.9),
        # nothing finite anywhere for a field: None, as on a parsed page
        ({"w0": "NaN", "w1": "NaN", "kv0": "NaN", "kv1": "NaN", "old_kv": "NaN", "b0": "+Inf", "b1": "NaN"}, None),
    ],
)
def test_values_read_by_layout_plan_equal_values_read_off_the_parsed_page(
    values: dict[str, object], kv_usage: float | None
) -> None:
    # the declarative adapter reads a laid-out page by a plan made once per layout; what it reads per page (which
    # source has a finite value) must still follow that page's values
    from collector.adapt import WANTED_FAMILIES
    from collector.engines.vllm import ADAPTER
    from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache
    from collector.exposition._page import LaidOutPage

    first = {"w0": 0, "w1": 0, "kv0": 0.1, "kv1": 0.1, "old_kv": 0.1, "b0": 1, "b1": 2}
    cache = LayoutCache(parse)
    pages = [_TWO_SOURCES.format(**first), _TWO_SOURCES.format(**values)]
    laid_out = [cache.parse("t", p, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES) for p in pages][-1]
    assert isinstance(laid_out, LaidOutPage)
    planned = ADAPTER.values(laid_out)
    assert _same(planned, ADAPTER.values(parse(pages[-1], wanted=WANTED_FAMILIES)))
    assert planned["kv_usage"] == kv_usage


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    """Equal, NaN equal to NaN (a histogram's sum)."""
    return repr(a) == repr(b)


# What kvpilot's Accept asked for before it named the text format alone: prometheus_client answered it with OpenMetrics.
_OPENMETRICS_ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


def _served_to_kvpilot(accept: str | None = None) -> tuple[bytes, str]:
    """A vLLM-like registry as prometheus_client answers ``accept`` (default: the scrape loop's own header)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client import Histogram as PromHistogram
    from prometheus_client.exposition import choose_encoder

    from collector.scrape_http import ACCEPT

    registry = CollectorRegistry()
    labels = ["engine", "model_name"]
    Gauge("vllm:num_requests_running", "", labels, registry=registry).labels("0", "m").set(4)
    Gauge("vllm:kv_cache_usage_perc", "", labels, registry=registry).labels("0", "m").set(0.25)
    Counter("vllm:prompt_tokens", "", labels, registry=registry).labels("0", "m").inc(500)
    ttft = PromHistogram("vllm:time_to_first_token_seconds", "", labels, buckets=[0.1, 1.0], registry=registry)
    ttft.labels("0", "m").observe(0.05)
    encoder, content_type = choose_encoder(ACCEPT if accept is None else accept)
    return encoder(registry), content_type


def test_kvpilot_asks_prometheus_client_for_the_text_format() -> None:
    # prometheus_client ignores q-values: an Accept that names OpenMetrics at all gets OpenMetrics with escaped names.
    body, content_type = _served_to_kvpilot()
    assert content_type.startswith("text/plain")
    assert b"vllm:time_to_first_token_seconds_bucket" in body


def test_a_page_as_prometheus_client_serves_kvpilot_has_its_histograms() -> None:
    from collector.adapt import adapt_page
    from collector.samples import TargetInfo

    body, content_type = _served_to_kvpilot()
    page = adapt_page(body, TargetInfo(url="http://served-text/metrics"), 0.0, content_type=content_type)
    (r,) = page.replicas
    assert (page.engine, r.model, r.requests_running, r.kv_usage, r.prompt_tokens) == ("vllm", "m", 4.0, 0.25, 500.0)
    assert r.ttft is not None
    assert r.ttft.count == 1.0


def test_an_underscore_escaped_openmetrics_page_is_read() -> None:
    # What prometheus_client >= 0.22 answers an Accept naming OpenMetrics (kvpilot's before, some other client's):
    # sample names escaped (vllm_num_requests_running under "# TYPE vllm:num_requests_running gauge"), so the
    # engine's declared family is empty and its samples sit under the escaped name. Before, every field was None.
    from collector.adapt import adapt_page
    from collector.samples import TargetInfo

    body, content_type = _served_to_kvpilot(_OPENMETRICS_ACCEPT)
    page = adapt_page(body, TargetInfo(url="http://served/metrics"), 0.0, content_type=content_type)
    (r,) = page.replicas
    assert (page.engine, r.model, r.requests_running, r.kv_usage, r.prompt_tokens) == ("vllm", "m", 4.0, 0.25, 500.0)


def test_the_histograms_of_an_underscore_escaped_openmetrics_page_are_read() -> None:
    # the parser reads the escaped _bucket/_sum/_count under their '# TYPE vllm:… histogram' line (_openmetrics notes)
    from collector.adapt import adapt_page
    from collector.samples import TargetInfo

    body, content_type = _served_to_kvpilot(_OPENMETRICS_ACCEPT)
    page = adapt_page(body, TargetInfo(url="http://served-h/metrics"), 0.0, content_type=content_type)
    ttft = page.replicas[0].ttft
    assert ttft is not None
    assert ttft.count == 1.0
