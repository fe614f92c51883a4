"""Serving stacks around the engines: prefixed names, several replicas on one page, stacks that yield to the engine,
and pages that are not an engine's (each case says what it proves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector import adapt
from collector.adapt import NoGpuFamilies, adapt_page
from collector.engines import UnknownEngine, describe_page, detect_engine
from collector.engines._prefix import find_prefix, strip_prefix
from collector.exposition import parse
from collector.samples import TargetInfo

RAY = "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt"


def _ray_page(metrics_fixtures: Path) -> bytes:
    return (metrics_fixtures / RAY).read_bytes()


def test_a_configured_prefix_reads_the_page_as_the_engine(metrics_fixtures: Path) -> None:
    page = adapt_page(_ray_page(metrics_fixtures), TargetInfo(url="http://ray-a/metrics", prefix="ray_"), 0.0)
    (replica,) = page.replicas
    assert (page.engine, replica.model, replica.prompt_tokens) == (
        "vllm",
        "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
        58.0,
    )
    assert "http://ray-a/metrics" not in adapt._found_prefixes  # configured, nothing to remember


def test_a_prefix_found_on_the_page_is_remembered_for_the_target(metrics_fixtures: Path) -> None:
    url = "http://ray-b/metrics"
    first = adapt_page(_ray_page(metrics_fixtures), TargetInfo(url=url), 0.0)
    assert adapt._found_prefixes[url] == "ray_"
    again = adapt_page(_ray_page(metrics_fixtures), TargetInfo(url=url), 1.0)  # the fast path, parsed once
    assert first.replicas[0].requests_waiting == again.replicas[0].requests_waiting == 0.0


def test_an_empty_prefix_turns_the_search_off_and_the_error_says_what_to_try(metrics_fixtures: Path) -> None:
    with pytest.raises(UnknownEngine) as err:
        adapt_page(_ray_page(metrics_fixtures), TargetInfo(url="http://ray-c/metrics", prefix=""), 0.0)
    message = str(err.value)
    assert "families starting with `ray_vllm:`" in message  # not "no families at all"
    assert "try `--prefix ray_` or `--engine vllm`" in message


def test_an_explicit_engine_finds_the_prefix_too(metrics_fixtures: Path) -> None:
    # `--engine vllm` on a Ray page is not refused: the engine's names are there behind the prefix
    page = adapt_page(_ray_page(metrics_fixtures), TargetInfo(url="http://ray-d/metrics"), 0.0, engine="vllm")
    assert page.replicas[0].kv_usage == pytest.approx(5.882698982295764e-05)


def test_find_prefix_cuts_only_at_word_boundaries() -> None:
    known = frozenset({"vllm:num_requests_waiting"})
    assert find_prefix(["ray_vllm:num_requests_waiting", "ray_node_cpu"], known) == ("ray_", 1)
    assert find_prefix(["xvllm:num_requests_waiting"], known) is None  # "x" is not a word of its own
    assert find_prefix(["vllm:num_requests_waiting"], known) is None  # already the engine's name


def test_strip_prefix_keeps_the_engines_own_family_over_a_prefixed_copy() -> None:
    families = parse("vllm:num_requests_waiting 1\nray_vllm:num_requests_waiting 5\n")
    stripped = strip_prefix(families, "ray_")
    assert [s.value for s in stripped["vllm:num_requests_waiting"].samples] == [1.0]


def _ray_two_workers() -> str:
    lines = []
    for worker, waiting in (("aaa", 3), ("bbb", 5)):
        labels = f'WorkerId="{worker}",model_name="m"'
        lines += [
            f"ray_vllm:num_requests_waiting{{{labels}}} {waiting}",
            f"ray_vllm:num_requests_running{{{labels}}} 1",
            f'ray_vllm:cache_config_info{{WorkerId="{worker}",block_size="16",num_gpu_blocks="100"}} 1',
        ]
    return "\n".join(lines) + "\n"


def test_ray_workers_on_one_node_page_are_one_replica_each() -> None:
    # one Ray node page, two vLLM actors: two replicas with their own queues, never one queue of 8
    page = adapt_page(_ray_two_workers(), TargetInfo(url="http://node/metrics", pod="node-1"), 0.0)
    got = {(r.replica, r.requests_waiting, r.kv_capacity_tokens) for r in page.replicas}
    assert got == {("node-1#aaa", 3.0, 1600.0), ("node-1#bbb", 5.0, 1600.0)}  # named by what differs


@pytest.mark.parametrize(
    ("queue", "batch"),
    [("sglang_num_queue_reqs", "sglang_num_running_reqs"), ("vllm_num_requests_waiting", "vllm_num_requests_running")],
)
def test_a_gateways_workers_on_one_page_are_one_replica_each(queue: str, batch: str) -> None:
    # SGLang Model Gateway's /engine_metrics: each worker's page with a worker_addr label, whatever the engine;
    # two replicas with their own queues, never one queue of 7 and one batch of 10
    text = "".join(
        f'{name}{{model_name="m",worker_addr="grpc://10.0.0.{n}:8001"}} {value}\n'
        for n, (waiting, running) in enumerate([(3, 8), (4, 2)], start=1)
        for name, value in ((queue, waiting), (batch, running))
    )
    page = adapt_page(text.encode(), TargetInfo(url="http://gw/engine_metrics", pod="gw-0"), 0.0)
    got = {(r.replica, r.requests_waiting, r.requests_running) for r in page.replicas}
    assert got == {("gw-0#grpc://10.0.0.1:8001", 3.0, 8.0), ("gw-0#grpc://10.0.0.2:8001", 4.0, 2.0)}


def _ray_sglang(replicas: tuple[str, ...], scheduler_replica_id: str | None) -> str:
    """SGLang under Ray Serve LLM with its schedulers as Ray actors: the tokenizer's series from each replica's actor
    (its ReplicaId), the scheduler's gauges from a scheduler actor of its own (no or an empty ReplicaId)."""
    lines = []
    for n, replica in enumerate(replicas):
        own = "" if scheduler_replica_id is None else f'ReplicaId="{scheduler_replica_id}",'
        lines += [
            f'ray_sglang_num_queue_reqs{{{own}WorkerId="sched{n}",model_name="m",tp_rank="0"}} {n + 4}',
            f'ray_sglang_prompt_tokens_total{{ReplicaId="{replica}",WorkerId="actor{n}",model_name="m"}}'
            f" {1000 * (n + 1)}",
        ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("replicas", "scheduler_replica_id", "expected"),
    [
        # one Serve replica: its scheduler actor's gauges and its own actor's counters are one replica, not two
        (("app#S#r1",), "", {("node-1", 4.0, 1000.0)}),
        (("app#S#r1",), None, {("node-1", 4.0, 1000.0)}),
        # two: told apart by ReplicaId; which scheduler serves which cannot be told, so the queues stay unknown
        (("app#S#r1", "app#S#r2"), "", {("node-1#app#S#r1", None, 1000.0), ("node-1#app#S#r2", None, 2000.0)}),
    ],
)
def test_ray_helper_actors_of_a_serve_replica_are_not_replicas(
    replicas: tuple[str, ...], scheduler_replica_id: str | None, expected: set[tuple[str, float | None, float]]
) -> None:
    page = adapt_page(_ray_sglang(replicas, scheduler_replica_id), TargetInfo(url="http://n/metrics", pod="node-1"), 0)
    assert page.engine == "sglang"
    assert {(r.replica, r.requests_waiting, r.prompt_tokens) for r in page.replicas} == expected


def test_two_tensorrt_llm_models_on_one_triton_are_two_replicas() -> None:
    text = ""
    for model, waiting, success in (("llama", 2, 10), ("mistral", 7, 30)):
        text += (
            f'nv_trt_llm_request_metrics{{model="{model}",request_type="waiting",version="1"}} {waiting}\n'
            f'nv_inference_request_success{{model="{model}",version="1"}} {success}\n'
        )
    text += 'nv_inference_request_success{model="preprocessing",version="1"} 40\n'  # an ensemble step: not a replica
    page = adapt_page(text, TargetInfo(url="http://triton/metrics", pod="t-0"), 0.0)
    got = sorted((r.replica, r.model, r.requests_waiting, r.requests_finished) for r in page.replicas)
    assert got == [("t-0#llama", "llama", 2.0, 10.0), ("t-0#mistral", "mistral", 7.0, 30.0)]


def test_plain_triton_is_not_an_llm_replica_even_when_asked_for() -> None:
    text = 'nv_inference_request_success{model="densenet_onnx",version="1"} 3\n'
    with pytest.raises(UnknownEngine, match="Triton without an LLM backend"):
        adapt_page(text, TargetInfo(url="http://triton-onnx/metrics"), 0.0)
    with pytest.raises(UnknownEngine, match="none of the trtllm families"):
        adapt_page(text, TargetInfo(url="http://triton-onnx/metrics"), 0.0, engine="trtllm")


def test_a_dynamo_worker_page_is_read_by_its_engines_adapter() -> None:
    # Dynamo's own series beside vLLM's: the engine's adapter reads the page; Dynamo's only when alone
    text = (
        'dynamo_component_requests_total{dynamo_component="backend"} 9\n'
        'dynamo_component_inflight_requests{dynamo_component="backend"} 2\n'
        'dynamo_component_gpu_cache_usage_percent{dynamo_component="backend"} 0.3\n'
        'vllm:num_requests_waiting{model_name="m"} 4\n'
    )
    assert detect_engine(parse(text)) == "vllm"
    assert detect_engine(parse(text.rsplit("vllm:", 1)[0])) == "dynamo"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # kvpilot's own /metrics page pointed at by mistake
        ("python_info 1\nkvpilot_replica_requests_waiting 3\nkvpilot_replica_kv_usage_ratio 0.5\n", "kvpilot's own"),
        # LMCache's internal metrics server rather than the vLLM server beside it
        ("lmcache:num_hit_tokens_total 9\nlmcache:num_requested_tokens_total 30\n", "LMCache's own metrics server"),
        # several leading words are listed, most frequent first
        ("foo_a 1\nfoo_b 1\nbar_c 1\n", "found 2 families starting with `foo_`, 1 with `bar_`"),
    ],
)
def test_pages_that_are_not_an_engines_say_what_they_are(text: str, message: str) -> None:
    assert message in describe_page(parse(text))
    with pytest.raises(UnknownEngine, match="no engine adapter matches"):
        adapt_page(text, TargetInfo(url="http://elsewhere/metrics"), 0.0)


def test_an_engine_asked_for_on_a_page_without_it_is_an_error_everywhere(metrics_fixtures: Path) -> None:
    vllm_page = (metrics_fixtures / "vllm-v1-dp2__handwritten.txt").read_bytes()
    with pytest.raises(UnknownEngine, match="GPU exporters' families"):
        adapt_page(vllm_page, TargetInfo(url="x"), 0.0, engine="dcgm")
    with pytest.raises(UnknownEngine, match="none of the sglang families"):
        adapt_page(vllm_page, TargetInfo(url="x", engine="sglang"), 0.0)
    # a GPU target's empty page says it is empty; the scrape loop reads it as no GPUs for a grace first, or for as
    # long as it lasts right after a page (tests/unit/collector/test_scrape_gpu_page.py)
    with pytest.raises(NoGpuFamilies, match="the page has no metric families at all") as empty:
        adapt_page("", TargetInfo(url="x", kind="gpu"), 0.0)
    assert empty.value.empty


def test_names_that_only_end_like_an_engines_are_reported_not_read() -> None:
    # "myapp_prompt_tokens" ends like NIM's generic prompt_tokens, but nothing identifies an engine
    text = "myapp_prompt_tokens_total 5\nmyapp_requests_total 3\n"
    with pytest.raises(UnknownEngine, match="found 2 families starting with `myapp_`"):
        adapt_page(text, TargetInfo(url="http://myapp/metrics"), 0.0)
    assert "http://myapp/metrics" not in adapt._found_prefixes


def test_an_info_series_from_another_process_does_not_make_a_replica() -> None:
    # Ray: the cache config under another worker id than the engine's gauges is not a second replica
    text = (
        'ray_vllm:num_requests_waiting{WorkerId="aaa",model_name="m"} 3\n'
        'ray_vllm:cache_config_info{WorkerId="zzz",block_size="16",num_gpu_blocks="100"} 1\n'
    )
    (replica,) = adapt_page(text, TargetInfo(url="http://node2/metrics", pod="n"), 0.0).replicas
    assert (replica.replica, replica.requests_waiting) == ("n", 3.0)


def test_the_wrong_engine_asked_for_names_the_right_one(metrics_fixtures: Path) -> None:
    # NIM's page under --engine vllm: not a prefix guess ("request_" + "prompt_tokens"), the engine it reads as
    nim = (metrics_fixtures / "nim__DataDog__integrations-core__nim_metrics.txt").read_bytes()
    with pytest.raises(UnknownEngine, match="it reads as nim: try `--engine nim`") as err:
        adapt_page(nim, TargetInfo(url="http://nim/metrics"), 0.0, engine="vllm")
    assert "--prefix" not in str(err.value)


def test_a_sanitised_namespace_is_restored_behind_the_prefix() -> None:
    # Ray releases that sanitise names write vLLM's vllm:x as ray_vllm_x; "ray_" is still the prefix, not "ray_vllm_"
    from collector.engines import IDENTIFYING_FAMILIES, NAMESPACES

    names = ["ray_vllm_num_requests_running", "ray_vllm_kv_cache_usage_perc", "ray_node_cpu_utilization"]
    assert find_prefix(names, IDENTIFYING_FAMILIES, NAMESPACES) == ("ray_", 2)
    text = 'ray_vllm_num_requests_running{model_name="m"} 4\nray_vllm_kv_cache_usage_perc{model_name="m"} 0.5\n'
    for prefix in ("ray_", None):  # configured, or found on the page
        page = adapt_page(text, TargetInfo(url=f"http://ray-s-{prefix}/metrics", prefix=prefix), 0.0)
        assert (page.engine, page.replicas[0].requests_running, page.replicas[0].kv_usage) == ("vllm", 4.0, 0.5)


def test_plain_triton_asked_for_as_trtllm_says_why(metrics_fixtures: Path) -> None:
    name = "triton-plain__DataDog__integrations-core__nvidia_triton_metrics__trimmed.txt"
    page = (metrics_fixtures / name).read_bytes()
    with pytest.raises(UnknownEngine, match=r"none of the trtllm families.*Triton without an LLM backend"):
        adapt_page(page, TargetInfo(url="http://triton-plain/metrics"), 0.0, engine="trtllm")


def test_a_router_page_asked_for_as_vllm_is_still_no_replica(metrics_fixtures: Path) -> None:
    # production-stack's router writes vllm:num_requests_running per backend `server`: `--engine vllm` must not turn
    # it into one replica holding every backend's queue (the backends are scraped as themselves)
    page = (metrics_fixtures / "vllm-production-stack-router__handwritten.txt").read_bytes()
    with pytest.raises(UnknownEngine, match=r"production-stack router.*scrape the vLLM engines behind it"):
        adapt_page(page, TargetInfo(url="http://router/metrics"), 0.0, engine="vllm")


@pytest.mark.parametrize(
    ("text", "engine", "running"),
    [
        # vLLM's vllm:x written vllm_x with no prefix in front: vLLM's page, not NIM's bare names behind "vllm_"
        ('vllm_num_requests_running{model_name="m"} 3\nvllm_kv_cache_usage_perc{model_name="m"} 0.5\n', "vllm", 3.0),
        # SGLang's sglang:x written sglang_x: every TP rank reports the same batch, the lowest rank alone is read
        (
            'sglang_num_running_reqs{model_name="m",tp_rank="0"} 4\n'
            'sglang_num_running_reqs{model_name="m",tp_rank="1"} 4\n'
            'sglang_token_usage{model_name="m",tp_rank="0"} 0.2\nsglang_token_usage{model_name="m",tp_rank="1"} 0.2\n',
            "sglang",
            4.0,
        ),
    ],
)
def test_sanitised_engine_names_read_as_the_engine(text: str, engine: str, running: float) -> None:
    page = adapt_page(text, TargetInfo(url=f"http://sanitised-{engine}/metrics"), 0.0)
    assert (page.engine, page.replicas[0].requests_running) == (engine, running)
