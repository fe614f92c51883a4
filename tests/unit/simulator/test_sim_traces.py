"""Trace loaders: real files parse, bad files fail naming the file and line, scalings do what they say."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import load_trace
from simulator.trace import PREFIX_BLOCK_TOKENS, SyntheticSpec


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("azure2023_conv.csv", 19_366),  # README row count: every row becomes one request
        ("azure2023_code.csv", 8_819),
        ("mooncake_synthetic_trace.jsonl", 3_993),
    ],
)
def test_real_request_traces_load_every_row_sorted(traces_dir: Path, name: str, rows: int) -> None:
    trace = load_trace(traces_dir / name)
    arrivals = np.array([r.arrival_s for r in trace.requests])
    assert len(arrivals) == rows
    assert arrivals[0] == 0.0
    assert np.all(np.diff(arrivals) >= 0)
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in trace.requests)


def test_mooncake_hash_ids_become_prefix_blocks(traces_dir: Path) -> None:
    trace = load_trace(traces_dir / "mooncake_synthetic_trace.jsonl")
    first = max(trace.requests[:50], key=lambda r: r.prompt_tokens)
    # hash ids name 512-token blocks: a prompt carries ceil(len/512) of them.
    assert len(first.prefix_blocks) == -(-first.prompt_tokens // PREFIX_BLOCK_TOKENS)


def test_azure_prefixes_are_synthesized_deterministically_and_shared(traces_dir: Path) -> None:
    a = load_trace(traces_dir / "azure2023_code.csv", seed=3).requests
    b = load_trace(traces_dir / "azure2023_code.csv", seed=3).requests
    c = load_trace(traces_dir / "azure2023_code.csv", seed=4).requests
    assert [r.prefix_blocks for r in a] == [r.prefix_blocks for r in b]
    assert [r.prefix_blocks for r in a] != [r.prefix_blocks for r in c]
    firsts = [r.prefix_blocks[0] for r in a if r.prefix_blocks]
    assert len(set(firsts)) < len(firsts) / 2  # many requests share a leading block
    assert all(len(r.prefix_blocks) == r.prompt_tokens // PREFIX_BLOCK_TOKENS for r in a)


@pytest.mark.parametrize(
    ("kwargs", "expect_ratio"),
    [
        ({"rate_scale": 2.0}, 2.0),  # a whole extra copy doubles the count
        ({"rate_scale": 0.5}, 0.5),  # thinning keeps about half
        ({"rate_scale": 2.5}, 2.5),  # two copies plus half of a third
        ({"time_scale": 0.5}, 1.0),  # compressing time keeps every request
    ],
)
def test_scaling_changes_counts_as_documented(traces_dir: Path, kwargs: dict[str, Any], expect_ratio: float) -> None:
    base = load_trace(traces_dir / "azure2023_code.csv")
    scaled = load_trace(traces_dir / "azure2023_code.csv", **kwargs)
    assert len(scaled.requests) / len(base.requests) == pytest.approx(expect_ratio, rel=0.03)
    assert scaled.duration_s == pytest.approx(base.duration_s * kwargs.get("time_scale", 1.0))


def test_window_selects_and_rebases(traces_dir: Path) -> None:
    full = load_trace(traces_dir / "azure2023_conv.csv")
    part = load_trace(traces_dir / "azure2023_conv.csv", start_s=600, duration_s=300)
    expected = [r for r in full.requests if 600 <= r.arrival_s < 900]
    assert len(part.requests) == len(expected)
    assert part.requests[0].arrival_s == pytest.approx(expected[0].arrival_s - 600)
    assert part.duration_s == 300


def test_servegen_rates_match_the_windows_and_samples_match_the_rates(traces_dir: Path) -> None:
    d = traces_dir / "servegen_m-large_days1-10"
    trace = load_trace(d, rate_scale=0.05, duration_s=1200)
    rs = trace.rate_series(600)
    raw = sum(float(line.split(",")[1]) for f in d.glob("chunk-*-trace.csv") for line in f.read_text().splitlines()[:1])
    assert rs.req_per_s[0] == pytest.approx(raw * 0.05)
    expected = rs.req_per_s.sum() * 600
    assert len(trace.requests) == pytest.approx(expected, rel=0.05)


def test_servegen_ten_days_expose_rates_without_sampling(traces_dir: Path) -> None:
    trace = load_trace(traces_dir / "servegen_m-large_days1-10")
    assert trace.duration_s == 1440 * 600
    times, rate, prompt, output = trace.rate_series(600)
    assert len(times) == 1440
    assert rate.min() >= 0
    assert prompt.min() > 0
    assert output.min() > 0
    assert 50_000 < rate.mean() * 600 < 200_000  # "~100k requests per 10 minutes"
    with pytest.raises(ValueError, match="fluid"):
        _ = trace.requests


def test_synthetic_has_diurnal_shape() -> None:
    spec = "synthetic:duration_s=86400,rate=2,amplitude=0.8,bursts=0"
    rs = load_trace(spec, seed=1).rate_series(3600)
    # The cycle starts at its trough and peaks half a period later.
    assert rs.req_per_s[10:14].mean() > 3 * rs.req_per_s[:2].mean()
    assert SyntheticSpec.parse(spec).amplitude == 0.8


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ("a,b,c\n1,2,3\n", ".csv", "unknown trace format"),  # a header of no accepted format
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,x,3\n", ".csv", ":2:"),  # bad int, line 2
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", ".csv", "no requests"),  # header only
        ('{"timestamp": 0, "input_length": 5}\n', ".jsonl", ":1:"),  # missing field, line 1
        ("[1, 2]\n", ".jsonl", "not a JSON object"),  # not an object
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n', ".jsonl", "hash_ids"),
        ("x", ".parquet", "unknown trace format"),  # unknown suffix
        # a field past the csv module's limit: an _csv.Error traceback
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46," + "1" * 200_000 + ",1\n",
            ".csv",
            r"unreadable CSV: field larger than field limit",
        ),
    ],
)
def test_bad_files_fail_naming_the_problem(tmp_path: Path, content: str, suffix: str, message: str) -> None:
    p = tmp_path / f"t{suffix}"
    p.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_trace(p)


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("synthetic:rate=abc", ValueError),  # non-numeric parameter
        ("synthetic:bogus=1", ValueError),  # unknown parameter
        ("synthetic:amplitude=2", ValueError),  # out of range
        # a MemoryError traceback (437 TiB asked of numpy), an OverflowError, numpy's words, a NaN replayed, 1e9 passes
        ("synthetic:rate=1e12,duration_s=10", ValueError),
        ("synthetic:duration_s=inf", ValueError),
        ("synthetic:rate=nan", ValueError),
        ("synthetic:prompt_mean=nan,duration_s=60", ValueError),  # replayed with prompts of -9.2e18 tokens
        ("synthetic:bursts=1000000000", ValueError),
        ("synthetic:duration_s=1e9,rate=0", ValueError),  # past the longest span a trace may have
        ("/nonexistent/trace.csv", FileNotFoundError),  # missing path
    ],
)
def test_bad_specs_raise(path: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        load_trace(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("600,1.0,1.0,Pareto,1,1", "unknown inter-arrival distribution"),
        # corrupt rows that were replayed: a p50 TTFT of 2e299 s at the fluid level; NaN or 0 shapes sampled anyway
        ("600,1e300,1.0,Weibull,0.5,0.5", r"rate above 1e\+05 requests/s"),
        ("600,1.0,1.0,Weibull,nan,0.5", "Weibull parameters must be finite and > 0"),
        ("600,1.0,1.0,Gamma,-1,-1", "Gamma parameters must be finite and > 0"),
    ],
)
def test_servegen_bad_row_names_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    (tmp_path / "chunk-0-trace.csv").write_text(f"0,1.0,1.0,Gamma,1.0,1.0\n{row}\n")
    with pytest.raises(ValueError, match=rf"chunk-0-trace.csv:2: {message}"):
        load_trace(tmp_path)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_azure_parser_never_fails_uncontrolled(tmp_path_factory: pytest.TempPathFactory, body: str) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + body)
    with contextlib.suppress(ValueError):
        load_trace(p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids"]),
                                st.one_of(st.integers(-5, 10**6), st.text(max_size=3), st.lists(st.integers()))),
                max_size=5))  # fmt: skip
def test_mooncake_parser_never_fails_uncontrolled(tmp_path_factory: pytest.TempPathFactory, rows: list[Any]) -> None:
    import json

    p = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    with contextlib.suppress(ValueError):
        load_trace(p)


@pytest.mark.parametrize(
    ("blocks", "replicas", "cache", "expected"),
    [
        ([(1, 2), (1, 2)], 1, None, 1023 / 2048),  # second request hits both blocks (less its last token)
        ([(1, 2), (1, 2)], 2, None, 0.0),  # dealt to two replicas: nothing seen where it lands
        ([(1, 2), (1, 3)], 1, None, 512 / 2048),  # the chain diverges after one block
        ([(1, 2), (3, 4), (1, 2)], 1, 2, 0.0),  # a 2-block LRU cache evicted 1 and 2 before the third request
    ],
)
def test_prefix_reuse_share(blocks: list[tuple[int, ...]], replicas: int, cache: int | None, expected: float) -> None:
    from simulator.trace.model import RequestColumns, Trace

    n = len(blocks)
    cols = RequestColumns(np.arange(n, dtype=float), np.full(n, 1024), np.ones(n, dtype=np.int64), blocks)
    assert Trace("t", n, _columns=cols).prefix_reuse_share(replicas, cache) == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from(["Gamma", "Weibull", "", "x"])),
                         max_size=7), max_size=4))  # fmt: skip
def test_servegen_parser_never_fails_uncontrolled(tmp_path_factory: pytest.TempPathFactory, rows: list[Any]) -> None:
    d = tmp_path_factory.mktemp("sg")
    (d / "chunk-0-trace.csv").write_text("\n".join(",".join(str(v) for v in row) for row in rows))
    with contextlib.suppress(ValueError):
        load_trace(d).rate_series(600)


def test_servegen_sub_window_samples_the_same_arrivals(traces_dir: Path) -> None:
    trace = load_trace(traces_dir / "servegen_m-large_days1-10", rate_scale=0.02, seed=9)
    whole = trace.sample_columns(0, 1800)
    part = trace.sample_columns(600, 1200)
    inside = (whole.arrival_s >= 600) & (whole.arrival_s < 1200)
    assert np.allclose(np.sort(part.arrival_s), np.sort(whole.arrival_s[inside] - 600))
    assert sorted(part.prompt_tokens.tolist()) == sorted(whole.prompt_tokens[inside].tolist())
