"""vLLM-compatible servers writing vLLM's names under their own namespace; detection by names only one adapter reads.

Both read wrong on d1ee2b5: `lmdeploy:num_requests_running` & co. read as NIM (the namespace cut off, leaving NIM's bare
names), with LMDeploy's API-server queue and per-token latency lost; a sparse MindIE page (scheduler gauges and
`npu_cache_usage_perc`) read as NIM, which scored two shared names against MindIE's one of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from collector.adapt import adapt_page
from collector.engines import ENGINES, UnknownEngine, detect_engine
from collector.engines._prefix import find_prefix, strip_prefix
from collector.exposition import parse
from collector.samples import ReplicaSample, TargetInfo

_LABELS = 'engine="0",model_name="internlm2_5-7b-chat"'
# LMDeploy's PrometheusStatLogger (InternLM/lmdeploy lmdeploy/metrics/loggers.py): 45 running and 5 waiting in the
# engine, 50 more held by the API server for a free engine instance (pull request #4297's log line)
LMDEPLOY = f"""# TYPE lmdeploy:num_requests_running gauge
lmdeploy:num_requests_running{{{_LABELS}}} 45.0
# TYPE lmdeploy:num_requests_waiting gauge
lmdeploy:num_requests_waiting{{{_LABELS}}} 5.0
# TYPE lmdeploy:num_api_requests_routed gauge
lmdeploy:num_api_requests_routed{{{_LABELS}}} 50.0
# TYPE lmdeploy:num_api_requests_waiting gauge
lmdeploy:num_api_requests_waiting{{{_LABELS}}} 50.0
# TYPE lmdeploy:gpu_cache_usage_perc gauge
lmdeploy:gpu_cache_usage_perc{{{_LABELS}}} 0.216
# TYPE lmdeploy:prompt_tokens_total counter
lmdeploy:prompt_tokens_total{{{_LABELS}}} 92370.0
# TYPE lmdeploy:request_success_total counter
lmdeploy:request_success_total{{finished_reason="ResponseType.FINISH",{_LABELS}}} 9.0
# TYPE lmdeploy:time_per_output_token_seconds histogram
lmdeploy:time_per_output_token_seconds_bucket{{le="0.05",{_LABELS}}} 9.0
lmdeploy:time_per_output_token_seconds_bucket{{le="+Inf",{_LABELS}}} 9.0
lmdeploy:time_per_output_token_seconds_count{{{_LABELS}}} 9.0
lmdeploy:time_per_output_token_seconds_sum{{{_LABELS}}} 0.27
# TYPE lmdeploy:iter_token_latency histogram
lmdeploy:iter_token_latency_bucket{{le="0.05",{_LABELS}}} 5500.0
lmdeploy:iter_token_latency_bucket{{le="+Inf",{_LABELS}}} 5520.0
lmdeploy:iter_token_latency_count{{{_LABELS}}} 5520.0
lmdeploy:iter_token_latency_sum{{{_LABELS}}} 165.6
"""
TARGET = TargetInfo(url="http://10.0.0.7:23333/metrics", pod="p-0")


def _one(text: str, engine: str, target: TargetInfo = TARGET) -> ReplicaSample:
    page = adapt_page(text, target, 0.0)
    assert page.engine == engine
    (replica,) = page.replicas
    return replica


def test_lmdeploy_reads_as_vllm_under_its_own_namespace() -> None:
    page = adapt_page(LMDEPLOY, TargetInfo(url="http://lmdeploy-a/metrics"), 0.0)
    assert (page.engine, page.prefix) == ("vllm", "lmdeploy:")  # was nim
    (r,) = page.replicas
    assert (r.model, r.requests_running, r.kv_usage, r.prompt_tokens) == ("internlm2_5-7b-chat", 45.0, 0.216, 92370.0)
    assert r.requests_finished == 9.0  # request_success_total, as vLLM's (NIM's read request_finish first)


def test_lmdeploy_api_server_queue_is_waiting_too() -> None:
    # 5 in the engine and 50 held by the API server until an engine instance is free: 55 queued at this replica
    r = _one(LMDEPLOY, "vllm", TargetInfo(url="http://lmdeploy-b/metrics"))
    assert r.requests_waiting == 55.0


def test_lmdeploy_inter_token_latency_is_its_per_token_histogram() -> None:
    # iter_token_latency is observed per token (vLLM's inter-token latency); time_per_output_token_seconds once per
    # request (its mean): the per-token one is the ITL
    r = _one(LMDEPLOY, "vllm", TargetInfo(url="http://lmdeploy-c/metrics"))
    assert r.itl is not None
    assert (r.itl.count, r.itl.sum) == (5520.0, pytest.approx(165.6))
    older = LMDEPLOY.split("# TYPE lmdeploy:iter_token_latency")[0]  # before lmdeploy wrote it
    r = _one(older, "vllm", TargetInfo(url="http://lmdeploy-d/metrics"))
    assert r.itl is not None
    assert r.itl.count == 9.0


def test_lmdeploy_is_read_behind_a_configured_namespace_too() -> None:
    target = TargetInfo(url="http://lmdeploy-e/metrics", pod="p-0", prefix="lmdeploy:")
    page = adapt_page(LMDEPLOY, target, 0.0)
    assert (page.engine, page.prefix) == ("vllm", "lmdeploy:")
    assert page.replicas[0].requests_waiting == 55.0


_FASTDEPLOY = """# TYPE fastdeploy:num_requests_running gauge
fastdeploy:num_requests_running 8.0
# TYPE fastdeploy:num_requests_waiting gauge
fastdeploy:num_requests_waiting 2.0
# TYPE fastdeploy:num_requests_enqueued gauge
fastdeploy:num_requests_enqueued 6.0
# TYPE fastdeploy:gpu_cache_usage_perc gauge
fastdeploy:gpu_cache_usage_perc 0.9
# TYPE fastdeploy:request_success_total counter
fastdeploy:request_success_total 120.0
"""


def test_fastdeploy_enqueued_requests_are_waiting() -> None:
    # enqueued (not yet scheduled) and waiting (scheduled, waiting for KV blocks): both queued
    r = _one(_FASTDEPLOY, "vllm", TargetInfo(url="http://fastdeploy/metrics"))
    assert (r.requests_running, r.requests_waiting, r.kv_usage, r.requests_finished) == (8.0, 8.0, 0.9, 120.0)


def test_a_sparse_compatible_page_without_nims_names_is_found_too() -> None:
    # no name NIM identifies (running, waiting, cache usage) once the namespace is cut: vLLM's names all the same
    text = "# TYPE aphrodite:prompt_tokens_total counter\naphrodite:prompt_tokens_total 70\n"
    text += "# TYPE aphrodite:generation_tokens_total counter\naphrodite:generation_tokens_total 300\n"
    r = _one(text, "vllm", TargetInfo(url="http://aphrodite/metrics"))
    assert (r.prompt_tokens, r.generation_tokens) == (70.0, 300.0)


def test_a_namespace_stands_for_the_engine_whose_names_are_most_often_there() -> None:
    from collector.engines._prefix import namespace_behind

    known = frozenset().union(*(a.families for a in ENGINES.values()))
    order = ("vllm", "sglang")
    assert namespace_behind(["x:num_running_reqs", "x:num_queue_reqs", "x:token_usage"], "x:", order, known) == (
        "sglang:"
    )
    # as many under either: vLLM's
    assert namespace_behind(["x:num_requests_running"], "x:", order, known) == "vllm:"
    # none under any engine namespace: read bare (MindIE's own name under another word)
    assert namespace_behind(["x:npu_cache_usage_perc"], "x:", order, known) == ""
    # a prefix in front of an engine namespace is not a namespace of its own
    assert namespace_behind(["ray_vllm:num_requests_running"], "ray_", order, known) == ""


def test_strip_prefix_with_a_namespace_keeps_sample_names_in_step() -> None:
    known = frozenset().union(*(a.families for a in ENGINES.values()))
    page = strip_prefix(parse(LMDEPLOY), "lmdeploy:", ("vllm", "sglang"), known)
    assert "vllm:inter_token_latency_seconds" in page
    assert {s.name for s in page["vllm:inter_token_latency_seconds"].samples} == {
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:inter_token_latency_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
    }
    waiting = page["vllm:num_requests_waiting"]
    assert sorted(s.value for s in waiting.samples) == [5.0, 50.0]
    assert {s.name for s in waiting.samples} == {"vllm:num_requests_waiting"}


def test_find_prefix_takes_a_namespace_for_an_engines() -> None:
    known = frozenset({"vllm:prompt_tokens", "vllm:prompt_tokens_total"})
    assert find_prefix(["aphrodite:prompt_tokens_total"], known, ("vllm",)) == ("aphrodite:", 1)
    # a known compatible server's namespace written sanitised swaps too (helper A2); any other word does not
    assert find_prefix(["aphrodite_prompt_tokens_total"], known, ("vllm",)) == ("aphrodite_", 1)
    assert find_prefix(["acme_prompt_tokens_total"], known, ("vllm",)) is None  # no namespace: no swap


def test_kvpilot_parse_says_the_names_were_read_under_another_namespace(tmp_path: Path) -> None:
    from kvpilot.cli import app

    page = tmp_path / "lmdeploy.txt"
    page.write_text(LMDEPLOY)
    result = CliRunner().invoke(app, ["parse", str(page), "--json"])
    assert result.exit_code == 0, result.stderr
    assert "read as vllm" in result.stderr
    assert "`lmdeploy:`" in result.stderr


# MindIE: the scheduler gauges are vLLM V0's unprefixed names, which NIM writes too; npu_cache_usage_perc only MindIE
_SPARSE_MINDIE = """num_requests_running{model_name="qwen"} 3
num_requests_waiting{model_name="qwen"} 1
npu_cache_usage_perc{model_name="qwen"} 0.4
"""


def test_a_sparse_mindie_page_is_mindie_not_nim() -> None:
    r = _one(_SPARSE_MINDIE, "mindie", TargetInfo(url="http://mindie/metrics"))
    assert (r.requests_running, r.requests_waiting, r.kv_usage) == (3.0, 1.0, 0.4)  # kv_usage was None as NIM


def test_names_only_one_adapter_reads_decide_before_shared_ones() -> None:
    # two names NIM identifies and MindIE reads, one only MindIE reads: MindIE; without it, NIM (its names)
    assert detect_engine(parse(_SPARSE_MINDIE)) == "mindie"
    assert detect_engine(parse(_SPARSE_MINDIE.replace("npu_cache_usage_perc", "gpu_cache_usage_perc"))) == "nim"
    # a tie between two adapters' own names is still refused
    with pytest.raises(UnknownEngine, match="equally"):
        detect_engine(parse("vllm:num_requests_running 1\ntgi_queue_size 0\n"))


def test_a_live_target_keeps_its_engine_when_a_page_could_be_either() -> None:
    """A sparse MindIE page without `npu_cache_usage_perc` is NIM's names and MindIE's alike: scraped alternately with
    and without it, one target stays MindIE (was: MindIE, NIM, MindIE, NIM). A page with a name only MindIE reads
    switches a target read as NIM."""
    without = _SPARSE_MINDIE.replace('npu_cache_usage_perc{model_name="qwen"} 0.4\n', "")
    target = TargetInfo(url="http://mindie-alternating/metrics")
    pages = [adapt_page(body, target, float(t)) for t, body in enumerate([_SPARSE_MINDIE, without] * 3)]
    assert [p.engine for p in pages] == ["mindie"] * 6
    assert [p.replicas[0].requests_running for p in pages] == [3.0] * 6
    assert [p.replicas[0].kv_usage for p in pages] == [0.4, None] * 3
    # read first without it: NIM, until a page names MindIE; then MindIE
    other = TargetInfo(url="http://mindie-late/metrics")
    assert [adapt_page(b, other, 0.0).engine for b in (without, _SPARSE_MINDIE, without)] == ["nim", "mindie", "mindie"]


def test_the_previous_engine_decides_only_a_page_without_another_engines_own_names() -> None:
    sparse = parse(_SPARSE_MINDIE.replace('npu_cache_usage_perc{model_name="qwen"} 0.4\n', ""))
    assert detect_engine(sparse, previous="mindie") == "mindie"
    assert detect_engine(sparse, previous="tgi") == "nim"  # TGI reads none of these names
    assert detect_engine(parse(_SPARSE_MINDIE), previous="nim") == "mindie"  # a name only MindIE reads
    tie = parse("vllm:num_requests_running 1\ntgi_queue_size 0\n")
    assert detect_engine(tie, previous="vllm") == "vllm"  # a tie with the previous engine: it stays
    with pytest.raises(UnknownEngine, match="equally"):
        detect_engine(tie, previous="sglang")
