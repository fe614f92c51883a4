"""Stacks whose pages kvpilot had not been shown (issue 12, helper A2 of session 15), each read as the page says.

- Docker Model Runner serves its llama-server runners' pages as one, each sample labelled ``model``: a replica per
  model, never one sum of unrelated models' queues.
- A GPUStack worker renames every instance's series into ``gpustack:`` and labels them ``model_instance_name``: a
  replica per instance, KV usage from ``kv_cache_usage_ratio``, preemptions from ``request_preemptions``, and the
  per-request ``time_per_output_token_seconds`` never read as the inter-token latency.
- A page that is JSON says so (llama-server's JSON-quoted /metrics of builds 7010 and later until the fix,
  trtllm-serve's JSON /metrics), instead of only "invalid metric name".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.engines import UnknownEngine
from collector.exposition import ParseError
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://10.0.0.1:8000/metrics", pod="pod-0")

# Docker Model Runner's labels on each runner's samples (docker/model-runner pull request #78)
_RUNNER = 'backend="llama.cpp",mode="completion",model="{model}"'
_RUNNERS = {"ai/llama3.2": (2, 4, 900), "ai/smollm2": (1, 0, 40)}  # processing, deferred, prompt tokens
_FAMILIES = (("requests_processing", "gauge"), ("requests_deferred", "gauge"), ("prompt_tokens_total", "counter"))
DOCKER_MODEL_RUNNER = "\n".join(
    f"# TYPE llamacpp:{name} {kind}\n"
    + "\n".join(f"llamacpp:{name}{{{_RUNNER.format(model=m)}}} {v[i]}" for m, v in _RUNNERS.items())
    + "\n"
    for i, (name, kind) in enumerate(_FAMILIES)
)


def test_docker_model_runner_models_are_replicas_of_their_own() -> None:
    page = adapt_page(DOCKER_MODEL_RUNNER, TARGET, 0.0)
    by_model = {r.model: r for r in page.replicas}
    assert set(by_model) == {"ai/llama3.2", "ai/smollm2"}  # before: one replica, model None, running 3
    assert (by_model["ai/llama3.2"].requests_running, by_model["ai/llama3.2"].requests_waiting) == (2.0, 4.0)
    assert (by_model["ai/smollm2"].requests_running, by_model["ai/smollm2"].requests_waiting) == (1.0, 0.0)
    assert by_model["ai/smollm2"].prompt_tokens == 40.0


def test_a_plain_llama_server_page_is_one_replica_without_a_model() -> None:
    page = adapt_page("llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\n", TARGET, 0.0)
    assert [(r.model, r.requests_running, r.requests_waiting) for r in page.replicas] == [(None, 2.0, 1.0)]


def _gpustack(instance: str, running: float, kv: float, tpot_only: bool = False) -> str:
    labels = (
        f'model_id="7",model_instance_id="{instance[-1]}",model_instance_name="{instance}",model_name="qwen3-8b",'
        'runtime="vllm",worker_id="3",worker_name="gpu-node-1",engine="0"'
    )
    latency = (
        f'gpustack:time_per_output_token_seconds_bucket{{{labels},le="+Inf"}} 10.0\n'
        f"gpustack:time_per_output_token_seconds_count{{{labels}}} 10.0\n"
        f"gpustack:time_per_output_token_seconds_sum{{{labels}}} 0.3\n"
    )
    if not tpot_only:
        latency += (
            f'gpustack:inter_token_latency_seconds_bucket{{{labels},le="+Inf"}} 500.0\n'
            f"gpustack:inter_token_latency_seconds_count{{{labels}}} 500.0\n"
            f"gpustack:inter_token_latency_seconds_sum{{{labels}}} 15.0\n"
        )
    return (
        f"gpustack:num_requests_running{{{labels}}} {running}\n"
        f"gpustack:num_requests_waiting{{{labels}}} 1.0\n"
        f"gpustack:kv_cache_usage_ratio{{{labels}}} {kv}\n"
        f"gpustack:request_preemptions_total{{{labels}}} 2.0\n" + latency
    )


GPUSTACK_TYPES = """\
# TYPE gpustack:num_requests_running gauge
# TYPE gpustack:num_requests_waiting gauge
# TYPE gpustack:kv_cache_usage_ratio gauge
# TYPE gpustack:request_preemptions_total counter
# TYPE gpustack:time_per_output_token_seconds histogram
# TYPE gpustack:inter_token_latency_seconds histogram
"""


def _typed(body: str) -> str:
    """Each TYPE line placed before its family's first sample."""
    out, typed = [], dict(line.split()[2:4] for line in GPUSTACK_TYPES.splitlines())
    for line in body.splitlines():
        for name, kind in list(typed.items()):
            if line.startswith(name):
                out.append(f"# TYPE {name} {kind}")
                del typed[name]
        out.append(line)
    return "\n".join(out) + "\n"


def test_gpustack_instances_kv_and_preemptions() -> None:
    body = _gpustack("qwen3-8b-a", 12.0, 0.71) + _gpustack("qwen3-8b-b", 3.0, 0.18)
    lines = sorted(body.splitlines(), key=lambda line: re.sub(r"_(bucket|count|sum|total)$", "", line.split("{")[0]))
    page = adapt_page(_typed("\n".join(lines)), TARGET, 0.0)
    assert page.engine == "vllm"
    by_replica = {r.replica: r for r in page.replicas}
    assert set(by_replica) == {"pod-0#qwen3-8b-a", "pod-0#qwen3-8b-b"}  # before: one replica, running 15
    a, b = by_replica["pod-0#qwen3-8b-a"], by_replica["pod-0#qwen3-8b-b"]
    assert (a.requests_running, a.kv_usage, a.preemptions) == (12.0, 0.71, 2.0)  # before: KV and preemptions None
    assert (b.requests_running, b.kv_usage) == (3.0, 0.18)
    assert a.itl is not None
    assert a.itl.count == 500.0  # the inter-token histogram, not the per-request TPOT's 10


def test_gpustack_per_request_tpot_is_not_the_inter_token_latency() -> None:
    page = adapt_page(_typed(_gpustack("qwen3-8b-a", 1.0, 0.2, tpot_only=True)), TARGET, 0.0)
    (replica,) = page.replicas
    assert replica.itl is None  # vLLM 0.11+'s request_time_per_output_token_seconds, once per request


LLAMA_TEXT = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (json.dumps(LLAMA_TEXT), "JSON string holding exposition text.*llama-server from build 7010.*#17386"),
        (json.dumps([LLAMA_TEXT]), "JSON string holding exposition text"),
        ("[]\n", "the page is JSON.*trtllm-serve.*/prometheus/metrics"),
        ('{"iter":60,"kvCacheStats":{"usedNumBlocks":3},"numQueuedRequests":0}\n', "the page is JSON"),
        # pretty-printed: a first line `{` or `[` alone (was "invalid metric name inside the braces" / "invalid
        # metric name")
        (json.dumps({"iter": 60, "kvCacheStats": {"usedNumBlocks": 3}}, indent=2), "line 1: the page is JSON"),
        ("\n" + json.dumps([{"iter": 60}], indent=2) + "\n", "line 2: the page is JSON.*trtllm-serve"),
        (json.dumps([LLAMA_TEXT], indent=2), "JSON string holding exposition text"),
    ],
)
def test_a_json_page_says_it_is_json(body: str, says: str) -> None:
    with pytest.raises(ParseError, match=says):
        adapt_page(body, TARGET, 0.0)


def test_a_quoted_utf8_metric_name_is_not_taken_for_json() -> None:
    with pytest.raises(ParseError) as caught:
        adapt_page('{"my.metric" 1\n', TARGET, 0.0)
    assert "JSON" not in str(caught.value)


def test_gpustack_renamed_counters_read_on_every_scrape() -> None:
    """The first scrape finds the namespace on the whole page; later ones parse only the wanted names behind the
    remembered prefix, asked by family or sample name (``request_preemptions_total``): both read the same."""
    page = _typed(_gpustack("qwen3-8b-a", 1.0, 0.2))
    target = TargetInfo(url="http://10.0.0.2:8000/metrics", pod="pod-1")
    first, second = (adapt_page(page, target, float(t)).replicas[0] for t in (0, 15))
    assert (first.preemptions, first.kv_usage) == (2.0, 0.2)
    assert (second.preemptions, second.kv_usage) == (2.0, 0.2)


def test_gpustack_untyped_renamed_counter_is_read() -> None:
    """Without TYPE lines the counter's family is its sample name, ``request_preemptions_total``: renamed with the
    suffix kept (``vllm:num_preemptions_total``, which vLLM's adapter reads on an untyped page), every scrape."""
    page = _gpustack("qwen3-8b-a", 1.0, 0.2)
    target = TargetInfo(url="http://10.0.0.3:8000/metrics", pod="pod-2")
    first, second = (adapt_page(page, target, float(t)).replicas[0] for t in (0, 15))
    assert (first.preemptions, first.kv_usage) == (2.0, 0.2)
    assert (second.preemptions, second.kv_usage) == (2.0, 0.2)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
LMDEPLOY = FIXTURES / "lmdeploy__InternLM__lmdeploy__metrics_loggers__from-source.txt"


@pytest.mark.parametrize("scrape", [0, 1])
def test_a_known_servers_namespace_written_sanitised_reads_as_with_the_colon(scrape: int) -> None:
    """``lmdeploy_…`` (a stack that rewrites names for Prometheus) reads as ``lmdeploy:…`` does: the API server's 50
    held requests are waiting too, and the ITL is the per-token ``iter_token_latency`` (before: read as NIM behind a
    prefix, waiting 5 and the ITL the per-request TPOT of 1 observation), on the first scrape and the later ones."""
    page = LMDEPLOY.read_text().replace("lmdeploy:", "lmdeploy_")
    target = TargetInfo(url="http://10.0.0.4:23333/metrics", pod="pod-3")
    for t in range(scrape + 1):
        adapted = adapt_page(page, target, float(t))
    assert (adapted.engine, adapted.prefix) == ("vllm", "lmdeploy_")
    (replica,) = adapted.replicas
    assert (replica.requests_running, replica.requests_waiting) == (45.0, 55.0)
    assert replica.itl is not None
    assert replica.itl.count == 1196.0


def test_an_unknown_word_before_vllms_bare_names_is_still_a_prefix_before_nims() -> None:
    page = LMDEPLOY.read_text().replace("lmdeploy:", "acme_")
    adapted = adapt_page(page, TargetInfo(url="http://10.0.0.5:8000/metrics", pod="pod-4"), 0.0)
    assert (adapted.engine, adapted.prefix) == ("nim", "acme_")


DCGM_LOWER = (
    'dcgm_fi_prof_gr_engine_active{gpu="0",uuid="GPU-ed13",modelName="NVIDIA A100 80GB PCIe",GPU_I_PROFILE="3g.40gb",'
    'GPU_I_ID="1",container_name="",pod_name="",pod_namespace=""} 0.000000\n'
)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (DCGM_LOWER, "none of the GPU exporters' families: found 1 family starting with `dcgm_`: DCGM fields named"),
        ("", "none of the GPU exporters' families: the page has no metric families at all"),
        ('acme_widgets{a="b"} 1\n', "none of the GPU exporters' families: found 1 family starting with `acme_`"),
    ],
)
def test_engine_dcgm_on_a_page_without_gpu_families_is_an_error(body: str, says: str) -> None:
    """``--engine dcgm`` on a page none of whose names any adapter reads (DCGM's fields in lower case, an empty page)
    said nothing and exited 0: now an error naming what the page holds."""
    with pytest.raises(UnknownEngine, match=says):
        adapt_page(body, TargetInfo(url="http://10.0.0.6:9400/metrics", pod="pod-5"), 0.0, engine="dcgm")
