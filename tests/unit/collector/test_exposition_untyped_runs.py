"""Sample lines that no family admits and whose names a read wants (an untyped page's: a grep of a /metrics page,
dcgm-exporter's GPUs without HELP or TYPE) are each a family of their own to the oracle. The usual ones are read
without the general sample reader (session 31, D): a run of one name's usual lines at once (its GPUs' lines of one
field, a histogram's buckets), a single usual line inline; anything else, and any run that does not read whole
(a bad label set or value, a series twice, the sample cap reached inside), line by line as before, which says what
is wrong where."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.exposition import ParseError, _text, parse
from tests.unit.collector.test_exposition_text import assert_agrees

GPUS = "".join(
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA H100"}} {30 + i}\n' for i in range(4)
) + "".join(
    f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA H100"}} {90.5 + i}\n' for i in range(4)
)
GREP = (
    'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
    'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 0.0\n'
    "\n"
    'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0\n'
    'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0\n'
    'vllm:e2e_bucket{le="0.5",model_name="m"} 1.0\n'
    'vllm:e2e_bucket{le="+Inf",model_name="m"} 2.0\n'
    'vllm:e2e_sum{model_name="m"} 0.75\n'
    'vllm:e2e_count{model_name="m"} 2.0\n'
)
WANTED = frozenset(
    {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "vllm:num_requests_waiting",
        "vllm:request_success",
        "vllm:request_success_total",
        "vllm:e2e",
    }
)


@pytest.mark.parametrize("text", [GPUS, GREP, GPUS + GREP + GPUS.replace("H1", "H2")], ids=["gpus", "grep", "twice"])
def test_untyped_pages_agree_with_prometheus_client(text: str) -> None:
    assert_agrees(text)
    assert_agrees(text, WANTED)
    # and a predicate reads the same as the scrape loop's selection
    assert parse(text, wanted=WANTED) == parse(text, wanted=lambda name: name in WANTED)


def test_usual_untyped_lines_are_read_without_the_general_sample_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = parse(GPUS + GREP, wanted=WANTED)

    def refused(*_args: object) -> object:
        raise AssertionError("the general sample reader read a usual line")

    monkeypatch.setattr(_text._TextParser, "_sample", refused)
    assert parse(GPUS + GREP, wanted=WANTED) == expected


@pytest.mark.parametrize(
    ("bad", "line_no", "message"),
    [
        ('DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1",modelName="NVIDIA H100"} hot\n', 2, "invalid value 'hot'"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1",modelName="NVIDIA H100"} 1_0\n', 2, "invalid value '1_0'"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1" modelName="x"} 31\n', 2, "invalid label set"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",modelName="NVIDIA H100"} 31\n', 2, "duplicate series"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="1",gpu="1"} 31\n', 2, "duplicate label name"),
    ],
)
def test_a_bad_line_in_a_run_is_reported_at_its_own_line(bad: str, line_no: int, message: str) -> None:
    lines = GPUS.splitlines(keepends=True)
    text = "".join([lines[0], bad, *lines[2:]])
    with pytest.raises(ParseError, match=message) as caught:
        parse(text, wanted=WANTED)
    assert caught.value.line_no == line_no
    if message != "duplicate series":  # an error of the family, not of one line: no line shown
        assert caught.value.line == bad.rstrip("\n")
    # read around: that name's family is left out, the other read as before
    partial = parse(text, wanted=WANTED, drop_bad_lines=True)
    assert [e.line_no for e in getattr(partial, "errors")] == [line_no]  # noqa: B009 (a PartialPage's)
    assert partial["DCGM_FI_DEV_POWER_USAGE"] == parse(GPUS, wanted=WANTED)["DCGM_FI_DEV_POWER_USAGE"]


def test_a_series_read_before_a_run_is_a_duplicate_in_it() -> None:
    lines = GPUS.splitlines(keepends=True)
    text = lines[2] + "up 1\n" + "".join(lines[:4])  # GPU 2 alone, then GPUs 0-3 as a run
    with pytest.raises(ParseError, match="duplicate series") as caught:
        parse(text, wanted=WANTED)
    assert caught.value.line_no == 5


@pytest.mark.parametrize("cap", [1, 3, 4, 5, 8])
def test_the_sample_cap_is_reached_where_it_is_line_by_line(cap: int) -> None:
    # 8 lines of two names: over the cap, the line after the cap's says so; at or under it, every line is read
    if cap >= 8:
        assert sum(len(f.samples) for f in parse(GPUS, wanted=WANTED, max_samples=cap).values()) == 8
        return
    with pytest.raises(ParseError, match=f"more than {cap} samples") as caught:
        parse(GPUS, wanted=WANTED, max_samples=cap)
    assert caught.value.line_no == cap + 1


_names = st.sampled_from(["g", "g_x", "gx", "h_bucket", "h_count", "u"])
_labels = st.sampled_from(["", 'a="1"', 'a="2"', 'a="1",b="x"', 'le="0.5"', 'a="1",le="+Inf"', 'a="\\"q\\""'])
_line = st.one_of(
    st.builds(lambda n, b, v: f"{n}{{{b}}} {v}", _names, _labels, st.sampled_from(["1", "2.5", "NaN", "-Inf"])),
    st.builds(lambda n, v: f"{n} {v}", _names, st.sampled_from(["1", "3"])),
    st.sampled_from(["", "# a comment", '{"g",a="1"} 4', " g 1", 'g{a="1"} 5 1700000000000']),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_line, max_size=14))
def test_any_untyped_page_agrees_with_prometheus_client(lines: list[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    assert_agrees(text, frozenset({"g", "h", "h_bucket", "h_count", "gx"}))
    assert_agrees(text)
