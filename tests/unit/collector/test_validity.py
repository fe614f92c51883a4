"""Pages with impossible values or repeated series (issue 11 item 9) never turn into facts.

Each case goes through the real entry point, ``adapt_page``, on a small vLLM or dcgm page.
"""

from __future__ import annotations

import math

import pytest

from collector import validity
from collector.adapt import adapt_page
from collector.exposition import ParseError
from collector.samples import Histogram, ReplicaSample, TargetInfo

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


def test_histogram_rules() -> None:
    inf = math.inf
    good = Histogram((1.0, inf), (1.0, 2.0), 3.0, 2.0)
    assert validity.histogram(good) is good
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), math.nan, 2.0)) is not None  # no sum: fine
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), -3.0, 2.0)) is None
    assert validity.histogram(Histogram((1.0, inf), (1.0, math.nan), 3.0, 2.0)) is None
    assert validity.histogram(Histogram((1.0, inf), (1.0, 2.0), 3.0, -2.0)) is None
