"""Pages with impossible values or repeated series (issue 11 item 9) never turn into facts.

Each case goes through the real entry point, ``adapt_page``, on a small vLLM or dcgm page.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector import validity
from collector.adapt import adapt_page
from collector.exposition import ParseError
from collector.samples import GpuSample, Histogram, ReplicaSample, TargetInfo

ENGINE = TargetInfo(url="http://x:8000/metrics", pod="p-0", node="n-1")
GPU = TargetInfo(url="http://x:9400/metrics", kind="gpu", node="n-1")


def vllm_page(
    *, waiting: str = "3", running: str = "21", kv: str = "0.5", prompt: str = "100", buckets: tuple[str, ...] = ()
) -> str:
    lines = [
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}',
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{model_name="m"}} {running}',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}',
        "# TYPE vllm:prompt_tokens_total counter",
        f'vllm:prompt_tokens_total{{model_name="m"}} {prompt}',
    ]
    if buckets:
        lines.append("# TYPE vllm:time_to_first_token_seconds histogram")
        for le, value in zip(("0.1", "1", "+Inf"), buckets, strict=True):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="m"}} {value}')
        lines.append(f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {buckets[-1]}')
        lines.append('vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5')
    return "\n".join(lines) + "\n"


def replica(text: str) -> ReplicaSample:
    page = adapt_page(text, ENGINE, 1.0)
    assert len(page.replicas) == 1
    return page.replicas[0]


def test_a_sane_page_is_read_as_is() -> None:
    r = replica(vllm_page(buckets=("1", "2", "3")))
    assert (r.requests_waiting, r.requests_running, r.kv_usage, r.prompt_tokens) == (3, 21, 0.5, 100)
    assert r.ttft is not None
    assert r.ttft.counts == (1, 2, 3)


def test_a_duplicated_gauge_is_refused_not_summed() -> None:
    doubled = vllm_page().replace(
        'vllm:num_requests_running{model_name="m"} 21\n',
        'vllm:num_requests_running{model_name="m"} 21\nvllm:num_requests_running{model_name="m"} 21\n',
    )
    with pytest.raises(ParseError, match=r"duplicate series vllm:num_requests_running\{model_name=\"m\"\}"):
        adapt_page(doubled, ENGINE, 1.0)


@pytest.mark.parametrize(
    ("field", "page"),
    [
        ("requests_waiting", vllm_page(waiting="-1")),
        ("requests_running", vllm_page(running="1e308")),
        ("requests_running", vllm_page(running="NaN")),
        ("requests_running", vllm_page(running="+Inf")),
        ("kv_usage", vllm_page(kv="3.2")),
        ("kv_usage", vllm_page(kv="-0.5")),
        ("kv_usage", vllm_page(kv="NaN")),
        ("prompt_tokens", vllm_page(prompt="-5")),
        ("prompt_tokens", vllm_page(prompt="1e300")),
        ("ttft", vllm_page(buckets=("3", "2", "3"))),  # cumulative counts going down
        ("ttft", vllm_page(buckets=("-1", "2", "3"))),
    ],
)
def test_an_impossible_value_becomes_unknown_and_the_rest_stays(field: str, page: str) -> None:
    r = replica(page)
    assert getattr(r, field) is None
    known = {"requests_waiting": 3.0, "requests_running": 21.0, "kv_usage": 0.5, "prompt_tokens": 100.0}
    for name, value in known.items():
        if name != field:
            assert getattr(r, name) == value


def test_kv_usage_a_rounding_step_outside_is_clamped() -> None:
    assert replica(vllm_page(kv="1.004")).kv_usage == 1.0
    assert replica(vllm_page(kv="-0.001")).kv_usage == 0.0


def test_two_engines_whose_sum_overflows_give_unknown_not_an_adapter_error() -> None:
    page = vllm_page().replace(
        'vllm:num_requests_running{model_name="m"} 21\n',
        'vllm:num_requests_running{model_name="m",engine="0"} 1e308\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 1e308\n',
    )
    assert replica(page).requests_running is None


def test_impossible_gpu_values_become_unknown() -> None:
    page = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",Hostname="n-1"} 250\n'
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0",Hostname="n-1"} -3\n'
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",Hostname="n-1"} 61\n'
    )
    (gpu,) = adapt_page(page, GPU, 1.0).gpus
    assert gpu.utilisation is None
    assert gpu.memory_used_bytes is None
    assert gpu.temperature_c == 61


_GPU_POSSIBLE = st.sampled_from([None, 0.0, -0.0, 0.5, 1.0, 1, 0, True, 0.03, 61.0, 3e6, 2.0**53])
_GPU_ODD = [-3.0, -0.005, -0.02, 1.005, 1.02, 250.0, 2.0**53 + 2, 2**60, math.nan, math.inf, -math.inf, 1e308, -0.0]
_GPU_ANY = st.sampled_from([None, 0.0, 0.5, 1.0, 1, True, 61.0, *_GPU_ODD])


_GPU_CHECKED = [*validity._GPU_COUNTS, *validity._GPU_FRACTIONS, "temperature_c"]


def _checked_as_the_rules_say(values: list[object]) -> None:
    """validity.gpu on a sample with ``values`` in _GPU_CHECKED's fields: every count by count(), every fraction by
    fraction(), the temperature finite; the same object back when nothing changes (the rule for nearly every sample,
    told apart in one pass), else those fields made right."""
    sample = GpuSample("n", "0", "u", "m", 1.0, **dict(zip(_GPU_CHECKED, values, strict=True)))  # type: ignore[arg-type]
    expected = {name: validity.count(getattr(sample, name)) for name in validity._GPU_COUNTS}
    expected |= {name: validity.fraction(getattr(sample, name)) for name in validity._GPU_FRACTIONS}
    t = sample.temperature_c
    expected["temperature_c"] = None if t is None or not math.isfinite(t) else t
    changed = {n: v for n, v in expected.items() if not (v is getattr(sample, n) or v == getattr(sample, n))}
    checked = validity.gpu(sample)
    if not changed:
        assert checked is sample
    else:
        assert checked == dataclasses.replace(sample, **changed)


@pytest.mark.parametrize("odd", _GPU_ODD)
@pytest.mark.parametrize("at", range(len(_GPU_CHECKED)), ids=lambda at: _GPU_CHECKED[at])
def test_one_odd_gpu_value_among_possible_ones_is_checked(at: int, odd: float) -> None:
    # every field in turn, every kind of value outside what it may hold (and -0.0), the rest possible
    values: list[object] = [3e6] * len(validity._GPU_COUNTS) + [0.03, 1.0, 61.0]
    values[at] = odd
    _checked_as_the_rules_say(values)


@given(
    values=st.lists(_GPU_POSSIBLE, min_size=11, max_size=11),
    odd=st.lists(st.tuples(st.integers(0, 10), _GPU_ANY), max_size=2),
)
def test_a_gpu_sample_is_checked_field_by_field(values: list[object], odd: list[tuple[int, object]]) -> None:
    # possible values with none, one or two values of any kind in any field
    for at, value in odd:
        values[at] = value
    _checked_as_the_rules_say(values)


def test_histogram_rules() -> None:
    inf = math.inf
    good = Histogram((1.0, inf), (1.0, 2.0), 3.0, 2.0)
    assert validity.histogram(good) is good
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), math.nan, 2.0)) is not None  # no sum: fine
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), -3.0, 2.0)) is None
    assert validity.histogram(Histogram((1.0, inf), (1.0, math.nan), 3.0, 2.0)) is None
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), 3.0, -2.0)) is None
