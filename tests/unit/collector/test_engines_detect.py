"""Engine detection and the registry: every fixture is recognised, anything else is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.adapt import adapt_page
from collector.engines import ENGINES, UnknownEngine, detect_engine, require_engine
from collector.exposition import parse
from collector.samples import TargetInfo


@pytest.mark.parametrize(
    ("fixture", "engine"),
    [
        # one case per engine fixture: the families present name the engine
        ("vllm__DataDog__integrations-core__vllm_metrics.txt", "vllm"),
        ("vllm-v1-dp2__handwritten.txt", "vllm"),
        ("sglang__DataDog__integrations-core__sglang_metrics.txt", "sglang"),
        ("tgi__DataDog__integrations-core__payload__partial.txt", "tgi"),
        ("trtllm-triton__triton-inference-server__tensorrtllm_backend__README.txt", "trtllm"),
        ("llamacpp-with-kv__handwritten.txt", "llamacpp"),
        ("llamacpp-without-kv__handwritten.txt", "llamacpp"),
    ],
)
def test_detects_every_engine_fixture(metrics_fixtures: Path, fixture: str, engine: str) -> None:
    assert detect_engine(parse((metrics_fixtures / fixture).read_text())) == engine


def test_dcgm_page_is_no_engine_and_the_error_lists_families(metrics_fixtures: Path) -> None:
    families = parse((metrics_fixtures / "dcgm__DataDog__integrations-core__metrics.txt").read_text())
    with pytest.raises(UnknownEngine, match="found 38 families starting with `DCGM_`") as err:
        detect_engine(families)
    assert "kind: gpu" in str(err.value)  # says what the page is and what to do


@pytest.mark.parametrize(
    ("page", "message"),
    [
        # empty page: nothing to go on
        ("", "no metric families at all"),
        # a process-only page names what it saw
        ("# TYPE process_open_fds gauge\nprocess_open_fds 3\n", "only runtime families \\(process_open_fds"),
        # one family each of two engines: ambiguous, not guessed
        ("vllm:num_requests_running 1\nsglang:num_running_reqs 1\n", "equally"),
        # routers in front of engines are named, not read as replicas (names from the projects' metric docs)
        ('sgl_router_running_requests{worker="w1"} 3\nsgl_router_active_workers 2\n', "SGLang's router"),
        ('smg_worker_requests_active{worker="w1"} 3\nsmg_router_requests_total 10\n', "SGLang Model Gateway"),
        ('inference_pool_average_queue_size{name="p"} 3\ninference_pool_ready_pods{name="p"} 2\n', "endpoint picker"),
    ],
)
def test_unrecognised_pages_raise(page: str, message: str) -> None:
    with pytest.raises(UnknownEngine, match=message):
        detect_engine(parse(page))


def test_unprefixed_trtllm_names_are_tensorrt_llm_only_with_its_label(metrics_fixtures: Path) -> None:
    # trtllm-serve 1.1 wrote vLLM-style request series unprefixed, as NIM does: TensorRT-LLM's own engine_type label
    # tells them apart; NIM is told by its scheduler and cache gauges
    trt = "# TYPE time_to_first_token_seconds histogram\n"
    trt += 'time_to_first_token_seconds_count{model_name="m",engine_type="pytorch"} 3\n'
    trt += 'time_to_first_token_seconds_sum{model_name="m",engine_type="pytorch"} 0.3\n'
    trt += "# TYPE request_success_total counter\n"
    trt += 'request_success_total{model_name="m",engine_type="pytorch",finished_reason="stop"} 3\n'
    assert detect_engine(parse(trt)) == "trtllm-pytorch"
    nim = parse((metrics_fixtures / "nim__DataDog__integrations-core__nim_metrics.txt").read_text())
    assert detect_engine(nim) == "nim"
    # neither label nor gauges (an idle trtllm-serve 1.1 has no samples yet): reported, not a replica of unknowns
    with pytest.raises(UnknownEngine, match="no engine adapter"):
        detect_engine(parse(trt.replace(',engine_type="pytorch"', "")))


def test_explicit_engine_must_match_the_page(metrics_fixtures: Path) -> None:
    families = parse((metrics_fixtures / "sglang__DataDog__integrations-core__sglang_metrics.txt").read_text())
    with pytest.raises(UnknownEngine, match="none of the vllm families"):
        require_engine("vllm", families)
    with pytest.raises(UnknownEngine, match="unknown engine 'nope'"):
        require_engine("nope", families)
    assert require_engine("sglang", families) is ENGINES["sglang"]


def test_registry_has_one_adapter_per_engine_with_disjoint_families() -> None:
    assert set(ENGINES) == {
        "vllm",
        "sglang",
        "tgi",
        "trtllm",
        "trtllm-pytorch",
        "llamacpp",
        "nim",
        "mindie",
        "dynamo",
    }
    names = list(ENGINES)
    for i, a in enumerate(names):
        assert ENGINES[a].name == a
        for b in names[i + 1 :]:
            first, second = ENGINES[a], ENGINES[b]
            # what identifies an engine by name alone is its own
            assert not (first.identifying or first.families) & (second.identifying or second.families), (a, b)
            # a name two engines read identifies one of them at most by name (NIM's unprefixed vLLM names, which
            # MindIE writes beside its own npu_* series: a page with only those reads as NIM, the same values), or
            # neither, and then only by a label (trtllm-serve 1.1's unprefixed series, NIM's)
            shared = first.families & second.families
            by_name = [shared & (e.identifying or e.families) for e in (first, second)]
            if shared and not any(by_name):
                assert getattr(first, "identifying_label", None) or getattr(second, "identifying_label", None), (a, b)


def test_configuration_knows_every_registered_engine() -> None:
    # `engine:` in the configuration and the API is checked against this list; a new adapter must be allowed there
    from store.fields import KNOWN_ENGINES

    assert set(KNOWN_ENGINES) == set(ENGINES)


def test_a_tie_says_so_where_the_page_is_adapted_too() -> None:
    # adapt_page reports a page it cannot adapt by what is on it; for a tie that must not be "leave the engine out"
    # (the engine was left out): both engines are named and the way out is to pass one
    page = "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\ntgi_queue_size 0\ntgi_batch_current_size 1\n"
    with pytest.raises(
        UnknownEngine, match=r"reads as (tgi|vllm) and as (tgi|vllm) equally \(2 families each\)"
    ) as err:
        adapt_page(page, TargetInfo(url="http://tie/metrics"), 0.0)
    assert "leave the engine out" not in str(err.value)
