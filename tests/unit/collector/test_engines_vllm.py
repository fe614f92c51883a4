"""vLLM adapter: real DataDog capture, the hand-written V1 data-parallel page, and older names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.adapt import adapt_page
from collector.samples import ReplicaSample, TargetInfo

TARGET = TargetInfo(url="http://10.0.0.7:8000/metrics", namespace="inference", deployment="llama-8b", pod="llama-8b-0")


def _one(text: str) -> ReplicaSample:
    page = adapt_page(text, TARGET, 1000.0)
    assert page.engine == "vllm"
    assert len(page.replicas) == 1
    return page.replicas[0]


def test_datadog_capture_values_read_off_the_page(metrics_fixtures: Path) -> None:
    r = _one((metrics_fixtures / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_text())
    assert (r.engine, r.model, r.replica, r.deployment_key) == (
        "vllm",
        "facebook/opt-125m",
        "llama-8b-0",
        "inference/llama-8b",
    )
    assert (r.requests_running, r.requests_waiting, r.kv_usage) == (0.0, 0.0, 0.0)
    assert r.kv_capacity_tokens == 7281 * 16  # num_gpu_blocks="7281", block_size="16"
    assert (r.prefix_queries, r.prefix_hits) == (117.0, 64.0)
    assert (r.preemptions, r.prompt_tokens, r.generation_tokens, r.requests_finished) == (0.0, 5.0, 7.0, 1.0)
    assert r.ttft is not None
    assert r.ttft.count == 1.0
    assert r.ttft.sum == pytest.approx(0.31326723098754883)
    # the page has both inter_token_latency (current) and time_per_output_token (older): current wins
    assert r.itl is not None
    assert r.itl.bounds == (0.01, 0.1, math.inf)
    assert r.itl.counts == (141.0, 144.0, 144.0)
    assert r.queue_time is not None
    assert r.queue_time.count == 6.0


def test_v1_two_engines_sum_counts_and_average_kv(metrics_fixtures: Path) -> None:
    r = _one((metrics_fixtures / "vllm-v1-dp2__handwritten.txt").read_text())
    assert r.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (r.requests_running, r.requests_waiting) == (21.0, 8.0)  # 12+9, 3+5
    assert r.kv_usage == pytest.approx(0.5)  # mean of 0.62 and 0.38
    assert r.kv_capacity_tokens == 20000 * 16  # each engine's info carries the total blocks of both: counted once
    assert (r.prefix_queries, r.prefix_hits) == (100000.0, 51000.0)
    assert (r.preemptions, r.prompt_tokens, r.generation_tokens) == (3.0, 310000.0, 80000.0)
    assert r.requests_finished == 616.0  # stop+length+abort over both engines: 321 + 295
    assert r.ttft is not None
    assert len(r.ttft.bounds) == 23
    assert r.ttft.bounds[0] == 0.001
    assert r.ttft.bounds[-2] == 2560.0
    assert r.ttft.counts[r.ttft.bounds.index(0.1)] == 350.0  # 190 + 160
    assert (r.ttft.counts[-1], r.ttft.count) == (616.0, 616.0)
    assert r.ttft.sum == pytest.approx(81.7)  # 40.5 + 41.2
    assert r.itl is not None
    assert r.itl.count == 79384.0
    assert r.itl.counts[r.itl.bounds.index(0.05)] == 69000.0
    assert r.e2e is not None
    assert r.e2e.counts[r.e2e.bounds.index(2.5)] == 410.0
    assert r.queue_time is not None
    assert r.queue_time.counts[0] == 570.0
    assert r.queue_time.sum == pytest.approx(55.5)


_V0 = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 4
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.4
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{model_name="m",le="0.05"} 7
vllm:time_per_output_token_seconds_bucket{model_name="m",le="+Inf"} 9
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.6
vllm:time_per_output_token_seconds_count{model_name="m"} 9
"""

_OLDER_PREFIX = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 2
vllm:num_requests_running{model_name="m",engine="1"} 3
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="m",engine="0"} 100
vllm:gpu_prefix_cache_queries_total{model_name="m",engine="1"} 50
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m",engine="0"} 40
vllm:gpu_prefix_cache_hits_total{model_name="m",engine="1"} 10
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",num_gpu_blocks="1000"} 1
"""

_UNTYPED = """vllm:num_requests_waiting{model_name="m"} 6
vllm:prompt_tokens_total{model_name="m"} 42
vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1
"""


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        # V0: gpu_cache_usage_perc feeds kv_usage, time_per_output_token feeds itl, the hit-rate gauge is not a counter
        (
            _V0,
            {
                "kv_usage": 0.75,
                "prefix_queries": None,
                "prefix_hits": None,
                "requests_running": 4.0,
                "preemptions": None,
            },
        ),
        # older gpu_prefix_cache_* counters; one unlabelled cache_config_info holds the pool of the whole front end
        (
            _OLDER_PREFIX,
            {"prefix_queries": 150.0, "prefix_hits": 50.0, "kv_capacity_tokens": 32 * 1000, "kv_usage": None},
        ),
        # no TYPE lines: counters keyed by their full name are still read; num_gpu_blocks="None" is unknown
        (
            _UNTYPED,
            {"requests_waiting": 6.0, "prompt_tokens": 42.0, "kv_capacity_tokens": None, "requests_running": None},
        ),
    ],
)
def test_older_names(page: str, expected: dict[str, object]) -> None:
    r = _one(page)
    for name, value in expected.items():
        assert getattr(r, name) == value, name


def test_v0_itl_from_time_per_output_token() -> None:
    itl = _one(_V0).itl
    assert itl is not None
    assert itl.bounds == (0.05, math.inf)
    assert itl.counts == (7.0, 9.0)
    assert itl.sum == 0.6


_engine_values = st.lists(
    st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(0, 1000).map(lambda x: x / 1000)),
    min_size=1,
    max_size=8,
)


@given(_engine_values)
def test_any_number_of_engines_sums_queues_and_averages_kv(engines: list[tuple[int, int, float]]) -> None:
    """Property: with N data-parallel engines, queues add up and KV usage is the plain mean."""
    lines = ["# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_waiting gauge"]
    lines += ["# TYPE vllm:kv_cache_usage_perc gauge"]
    for i, (running, waiting, kv) in enumerate(engines):
        labels = f'{{model_name="m",engine="{i}"}}'
        lines += [
            f"vllm:num_requests_running{labels} {running}",
            f"vllm:num_requests_waiting{labels} {waiting}",
            f"vllm:kv_cache_usage_perc{labels} {kv}",
        ]
    r = _one("\n".join(lines) + "\n")
    assert r.requests_running == sum(e[0] for e in engines)
    assert r.requests_waiting == sum(e[1] for e in engines)
    assert r.kv_usage == pytest.approx(sum(e[2] for e in engines) / len(engines))


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        # the engine's own pool size wins over blocks x block size (hybrid KV: 33960 x 16 = 543,360 is wrong)
        ('block_size="16",kv_cache_size_tokens="855836",num_gpu_blocks="33960"', 855836.0),
        # kv_cache_size_tokens written "None": vLLM (0.24+) does so only for a model without KV cache groups
        ('block_size="16",kv_cache_size_tokens="None",num_gpu_blocks="100"', None),
        # reported without the block labels: still known
        ('kv_cache_size_tokens="4096"', 4096.0),
        # a hybrid-Mamba model before vLLM reported its size (0.20.2, Qwen3.6-27B): block_size is the front end's
        # stale 16 while the engine's 1147 blocks hold ~1,500 tokens each; the product (18,352) is no capacity
        ('block_size="16",mamba_block_size="16",num_gpu_blocks="1147"', None),
        ('block_size="528",mamba_page_size_padded="1081344",num_gpu_blocks="900"', None),
        # the engine's own figure still wins on a hybrid
        ('block_size="16",kv_cache_size_tokens="1708404",mamba_block_size="16",num_gpu_blocks="1147"', 1708404.0),
        # mamba_block_size="None" (no Mamba layers, as current vLLM writes for every other model): blocks x block size
        ('block_size="16",mamba_block_size="None",mamba_page_size_padded="None",num_gpu_blocks="100"', 1600.0),
        # "0" is no Mamba size vLLM can hold (mamba_block_size: Field(gt=0) from 0.12 to 0.34; the padded page is an
        # attention page's bytes), so it says nothing of Mamba layers: blocks x block size, as for "None"
        ('block_size="16",mamba_block_size="0",num_gpu_blocks="100"', 1600.0),
        ('block_size="16",mamba_block_size="0",mamba_page_size_padded="0",num_gpu_blocks="100"', 1600.0),
    ],
)
def test_kv_capacity_prefers_what_the_engine_reports(info: str, expected: float | None) -> None:
    page = f'vllm:num_requests_waiting{{model_name="m"}} 1\nvllm:cache_config_info{{{info}}} 1\n'
    assert _one(page).kv_capacity_tokens == expected


def test_engine_reported_capacity_is_summed_over_data_parallel_engines() -> None:
    page = "".join(
        f'vllm:num_requests_waiting{{model_name="m",engine="{e}"}} 1\n'
        f'vllm:cache_config_info{{engine="{e}",block_size="16",num_gpu_blocks="10",kv_cache_size_tokens="{t}"}} 1\n'
        for e, t in (("0", 500), ("1", 700))
    )
    assert _one(page).kv_capacity_tokens == 1200.0


def _names_quoted(text: str) -> str:
    """The page as a server negotiating UTF-8 names (Prometheus 3's ``escaping=allow-utf-8``) could write it: every
    name quoted, the sample's inside the braces (servers quote only names the classic format cannot write; a saved
    page may hold either)."""
    out = []
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            keyword, name, rest = line[2:].split(" ", 2)
            out.append(f'# {keyword} "{name}" {rest}')
        elif line and not line.startswith("#"):
            name, brace, rest = line.partition("{")
            if brace:
                out.append("{" + f'"{name}",' + rest)
            else:
                name, value = line.split(" ", 1)
                out.append("{" + f'"{name}"' + "} " + value)
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    "fixture",
    [
        "vllm-v1-current-dp2__vllm-project__vllm__v1_metrics_loggers__from-source.txt",
        "vllm__DataDog__integrations-core__vllm_metrics.txt",
    ],
)
def test_names_inside_the_braces_read_as_the_classic_page(metrics_fixtures: Path, fixture: str) -> None:
    classic = (metrics_fixtures / fixture).read_text()
    quoted = _names_quoted(classic)
    assert '{"vllm:num_requests_waiting",' in quoted
    expected = adapt_page(classic, TARGET, 1000.0).replicas
    target = TargetInfo(url="http://quoted/" + fixture, namespace="inference", deployment="llama-8b", pod="llama-8b-0")
    for _ in range(2):  # the second page of a target is read off the layout learnt from the first
        assert adapt_page(quoted, target, 1000.0).replicas == expected


def _registry() -> object:
    """A V1 engine's series in a registry of their own (names and labels as vllm/v1/metrics/loggers.py has them)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    for name, value in (("num_requests_running", 6), ("num_requests_waiting", 2), ("kv_cache_usage_perc", 0.4)):
        Gauge(f"vllm:{name}", name, labels, registry=registry).labels("m", "0").set(value)
    for name, value in (("prompt_tokens", 5000), ("generation_tokens", 900), ("prefix_cache_queries", 4000)):
        Counter(f"vllm:{name}", name, labels, registry=registry).labels("m", "0").inc(value)
    Counter("vllm:request_success", "s", [*labels, "finished_reason"], registry=registry).labels("m", "0", "stop").inc(
        9
    )
    for name in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        histogram = Histogram(f"vllm:{name}", name, labels, buckets=[0.1, 1.0], registry=registry)
        for value in (0.05, 0.5, 2.0):
            histogram.labels("m", "0").observe(value)
    info = Gauge("vllm:cache_config_info", "c", ["block_size", "num_gpu_blocks", "engine"], registry=registry)
    info.labels("16", "1000", "0").set(1)
    return registry


def test_escaped_openmetrics_page_reads_as_the_classic_page() -> None:
    """prometheus_client (>= 0.22) answers an Accept naming OpenMetrics with sample names whose ``:`` is written
    ``_`` under metadata that keeps it (client_python#1177): read as the classic page, histograms included."""
    from prometheus_client import generate_latest as classic_text
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

    registry = _registry()
    page = openmetrics_text(registry, escaping="underscores").decode()  # type: ignore[arg-type]
    assert "vllm_time_to_first_token_seconds_bucket{" in page
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in page
    om = adapt_page(page, TARGET, 1000.0, content_type="application/openmetrics-text; version=1.0.0").replicas
    assert om == adapt_page(classic_text(registry), TARGET, 1000.0).replicas  # type: ignore[arg-type]
    assert om[0].ttft is not None  # the histograms too, not only gauges and counters
    assert om[0].itl is not None
    assert (om[0].requests_running, om[0].kv_capacity_tokens, om[0].requests_finished) == (6.0, 16000.0, 9.0)


_API_SERVERS = "vllm-0.10-api-servers__vllm-project__vllm__v1_metrics_loggers__from-source.txt"
_LLAMA = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'


def _without_family(text: str, name: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if name not in line)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # 0.9.2-0.10.2: gpu_cache_usage_perc (mostrecent) holds the newest value of each engine: 0.62 and 0.58;
        # the mean over API server processes read 0.695 (API server 4101's 0.81/0.77 are from an earlier peak)
        (lambda t: t, (0.62 + 0.58) / 2),
        # 0.11.0: gpu_cache_usage_perc hidden; each engine's highest process sample (0.81, 0.77)
        (lambda t: _without_family(t, "vllm:gpu_cache_usage_perc"), (0.81 + 0.77) / 2),
        # a third API server that never received an engine's stats holds 0: it does not pull the engines down
        (
            lambda t: (
                _without_family(t, "vllm:gpu_cache_usage_perc")
                + "".join(f'vllm:kv_cache_usage_perc{{engine="{e}",{_LLAMA},pid="4103"}} 0.0\n' for e in "01")
            ),
            (0.81 + 0.77) / 2,
        ),
    ],
)
def test_kv_usage_written_once_per_api_server_reads_the_engines_value(
    metrics_fixtures: Path, edit: object, expected: float
) -> None:
    text = edit((metrics_fixtures / _API_SERVERS).read_text())  # type: ignore[operator]
    r = _one(text)
    assert r.kv_usage == pytest.approx(expected)
    # the mostrecent request gauges and the counters summed over processes are read as on any page
    assert (r.requests_running, r.requests_waiting) == (78.0, 8.0)
    assert r.kv_capacity_tokens == 28000 * 16  # the front end's total, on each engine's sample


def test_a_single_process_page_is_read_as_before(metrics_fixtures: Path) -> None:
    # without the pid label kv_cache_usage_perc's mean over engines stands (here 0.5 and 0.58), not gpu_cache's 0.6
    text = _without_family((metrics_fixtures / _API_SERVERS).read_text(), 'pid="4101"')
    single = text.replace('pid="4102"} 0.62', 'pid="4102"} 0.5').replace(',pid="4102"', "")
    assert "pid=" not in single
    assert _one(single).kv_usage == pytest.approx((0.5 + 0.58) / 2)
