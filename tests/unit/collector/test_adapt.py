"""The single entry point from page to samples: routing by target kind, decoding, errors, fuzzing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES, NoGpuFamilies, adapt_families, adapt_page
from collector.engines import ENGINES, UnknownEngine
from collector.exposition import ParseError, parse
from collector.samples import TargetInfo

ENGINE_TARGET = TargetInfo(url="http://x:8000/metrics", pod="p-0", node="n-1")
GPU_TARGET = TargetInfo(url="http://x:9400/metrics", kind="gpu", node="n-1")
VLLM = "vllm-v1-dp2__handwritten.txt"
DCGM = "dcgm-mig-hostname__handwritten.txt"
RAY = "ray-serve-vllm__DataDog__integrations-core__ray_vllm_metrics__trimmed.txt"


def test_wanted_families_cover_every_adapter_and_skip_runtime_series() -> None:
    for adapter in ENGINES.values():
        assert adapter.families <= WANTED_FAMILIES
    assert "DCGM_FI_DEV_XID_ERRORS" in WANTED_FAMILIES
    assert "process_resident_memory_bytes" not in WANTED_FAMILIES


def test_bytes_and_str_give_the_same_page(metrics_fixtures: Path) -> None:
    raw = (metrics_fixtures / VLLM).read_bytes()
    assert adapt_page(raw, ENGINE_TARGET, 1.0) == adapt_page(raw.decode(), ENGINE_TARGET, 1.0)


@pytest.mark.parametrize(
    ("target", "engine", "replicas", "gpus"),
    [
        # engine target, auto-detected
        (ENGINE_TARGET, None, 1, 0),
        # explicit engine
        (ENGINE_TARGET, "vllm", 1, 0),
        # the target's configured engine is used when no override is given
        (TargetInfo(url="u", engine="vllm"), None, 1, 0),
    ],
)
def test_routing_on_an_engine_page(
    metrics_fixtures: Path, target: TargetInfo, engine: str | None, replicas: int, gpus: int
) -> None:
    page = adapt_page((metrics_fixtures / VLLM).read_text(), target, 1.0, engine=engine)
    assert (len(page.replicas), len(page.gpus)) == (replicas, gpus)


def test_a_gpu_target_on_an_engine_page_says_what_the_page_is(metrics_fixtures: Path) -> None:
    # it ignored the engine families and read as a node without GPUs, without a word (issue 12)
    with pytest.raises(NoGpuFamilies, match=r"page has none of the GPU exporters' families: .*it reads as vllm") as e:
        adapt_page((metrics_fixtures / VLLM).read_text(), GPU_TARGET, 1.0)
    # what to change is the target's kind; "try `--engine vllm`" named a flag of kvpilot scrape, and in `kvpilot
    # run`'s last_error (GET /v1/targets) no flag at all (session 16, a new operator's walk-through)
    assert "an engine's page, not a GPU exporter's: scrape it as an engine" in str(e.value)
    assert "try `--engine vllm`" not in str(e.value)


@pytest.mark.parametrize(
    ("target", "engine"),
    [
        # gpu target
        (GPU_TARGET, None),
        # an engine target whose page turns out to be dcgm: GPUs, not an error
        (ENGINE_TARGET, None),
        # the CLI's --engine dcgm
        (ENGINE_TARGET, "dcgm"),
    ],
)
def test_dcgm_page_yields_gpus(metrics_fixtures: Path, target: TargetInfo, engine: str | None) -> None:
    page = adapt_page((metrics_fixtures / DCGM).read_text(), target, 1.0, engine=engine)
    assert (page.engine, page.replicas, len(page.gpus)) == (None, [], 4)


def test_page_with_engine_and_dcgm_families_yields_both(metrics_fixtures: Path) -> None:
    text = (metrics_fixtures / VLLM).read_text() + (metrics_fixtures / DCGM).read_text()
    page = adapt_page(text, ENGINE_TARGET, 1.0)
    assert (page.engine, len(page.replicas), len(page.gpus)) == ("vllm", 1, 4)
    assert page.replicas[0].requests_running == 21.0


def test_a_prefix_the_page_does_not_have_is_named_with_what_the_page_holds(metrics_fixtures: Path) -> None:
    # a target configured with `prefix: foo_` on Ray Serve's page (every family under `ray_vllm:`): the error names
    # the prefix and what the page holds, not "no metric families at all" (it has dozens)
    target = TargetInfo(url="http://x:8000/metrics", pod="p-0", node="n-1", prefix="foo_")
    with pytest.raises(UnknownEngine) as raised:
        adapt_page((metrics_fixtures / RAY).read_text(), target, 1.0)
    assert "prefix `foo_`" in str(raised.value)
    assert "no metric families at all" not in str(raised.value)


def test_explicit_engine_that_does_not_match_is_reported(metrics_fixtures: Path) -> None:
    with pytest.raises(UnknownEngine, match="none of the sglang families"):
        adapt_page((metrics_fixtures / VLLM).read_text(), ENGINE_TARGET, 1.0, engine="sglang")


def test_openmetrics_content_type_selects_the_openmetrics_parser() -> None:
    text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n# EOF\n"
    page = adapt_page(
        text, ENGINE_TARGET, 1.0, content_type="application/openmetrics-text; version=1.0.0; charset=utf-8"
    )
    assert page.replicas[0].requests_waiting == 3.0
    without_eof = text.replace("# EOF\n", "")
    assert adapt_page(without_eof, ENGINE_TARGET, 1.0, content_type="text/plain; version=0.0.4").replicas
    with pytest.raises(ParseError):  # OpenMetrics requires the closing "# EOF"
        adapt_page(without_eof, ENGINE_TARGET, 1.0, content_type="application/openmetrics-text")


def test_non_utf8_page_is_a_parse_error_naming_the_line() -> None:
    with pytest.raises(ParseError, match="line 2: invalid UTF-8"):
        adapt_page(b'vllm:num_requests_running 1\nvllm:num_requests_waiting{a="\xff"} 2\n', ENGINE_TARGET, 1.0)


def test_adapt_families_equals_adapt_page(metrics_fixtures: Path) -> None:
    text = (metrics_fixtures / VLLM).read_text()
    assert adapt_families(parse(text), ENGINE_TARGET, 1.0) == adapt_page(text, ENGINE_TARGET, 1.0)


_LINE = st.one_of(
    st.sampled_from(sorted(WANTED_FAMILIES)).flatmap(
        lambda name: st.tuples(
            st.just(name),
            st.sampled_from(["", '{engine="0"}', '{le="0.5"}', '{gpu="0",UUID="u"}', '{model_name="m",tp_rank="1"}']),
            st.sampled_from(["1", "0", "NaN", "+Inf", "-3", "9223372036854775794", "x"]),
        ).map(lambda t: f"{t[0]}{t[1]} {t[2]}")
    ),
    st.text(max_size=40),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, max_size=12), st.sampled_from([ENGINE_TARGET, GPU_TARGET]))
def test_any_page_adapts_or_raises_a_reported_error(lines: list[str], target: TargetInfo) -> None:
    """Outside input: the only outcomes are samples, a ParseError or an UnknownEngine (both ValueError)."""
    try:
        page = adapt_page("\n".join(lines) + "\n", target, 1.0)
    except (ParseError, UnknownEngine):
        return
    for r in page.replicas:
        assert r.kv_usage is None or isinstance(r.kv_usage, float)


def test_a_bad_sample_line_loses_its_family_and_the_page_says_so() -> None:
    # dcgm-exporter's value for a field it cannot render: the page is read without that family (it was lost whole)
    page = (
        '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 88\n'
        "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} ERROR - FAILED TO CONVERT TO STRING\n'
    )
    adapted = adapt_page(page, TargetInfo(url="http://n1:9400/metrics", kind="gpu"), 0.0)
    (gpu,) = adapted.gpus
    assert (gpu.utilisation, gpu.power_w) == (0.88, None)  # GPU_UTIL 88 %
    assert adapted.parse_errors[-1] == "families left out: DCGM_FI_DEV_POWER_USAGE"
    assert "line 4" in adapted.parse_errors[0]
    whole = page.replace("ERROR - FAILED TO CONVERT TO STRING", "70")
    assert adapt_page(whole, TargetInfo(url="http://n2:9400/metrics", kind="gpu"), 0.0).parse_errors == ()
