"""A page without ``# TYPE`` lines reads as the page with them (collector/exposition/_untyped.py).

``curl … | grep -v '^#'`` is how pages travel in bug reports and tutorials: every real page in the fixtures, its
comment lines removed, must yield the replicas and GPUs the page itself yields, by every parse path (the parser,
the layout cache's fast path on the page's second scrape, compiled or pure: whichever is installed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES, AdaptedPage, adapt_page
from collector.engines import UnknownEngine
from collector.exposition import LayoutCache, MetricFamily, ParseError, parse
from collector.samples import TargetInfo

_TESTS = Path(__file__).resolve().parents[2]
DIRS = (_TESTS / "fixtures" / "metrics", _TESTS.parent.parent / "shared" / "fixtures" / "metrics")
PAGES = sorted(p for d in DIRS if d.is_dir() for p in d.glob("*.txt"))


def strip_comments(text: str) -> str:
    """What ``grep -v '^#'`` leaves of a page."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def _read(text: str, url: str) -> AdaptedPage | type[Exception]:
    try:
        return adapt_page(text, TargetInfo(url=url, pod="pod-0"), 0.0)
    except (UnknownEngine, ParseError) as e:
        return type(e)


def _values(page: AdaptedPage | type[Exception]) -> Any:
    if not isinstance(page, AdaptedPage):
        return page
    # compared by repr: a histogram without _sum reads a NaN sum, and NaN != NaN unless both are the same float object
    # (one constant in pure Python; a float made per read by the compiled modules)
    replicas = [repr({**dataclasses.asdict(r), "timestamp": None}) for r in page.replicas]
    gpus = [repr({**dataclasses.asdict(g), "timestamp": None}) for g in page.gpus]
    return page.engine, sorted(replicas), sorted(gpus)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: f"{p.parent.parent.parent.name}/{p.name}")
def test_a_page_without_comment_lines_reads_as_the_page(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    stripped = strip_comments(text)
    if not stripped.strip():
        pytest.skip("only comment lines (vLLM with stats off): without them nothing is left to read")
    expected = _values(_read(text, f"typed/{page.name}"))
    url = f"stripped/{page.name}"
    assert _values(_read(stripped, url)) == expected
    assert _values(_read(stripped, url)) == expected  # the second scrape: off the layout learnt from the first


@pytest.mark.parametrize("page", PAGES, ids=lambda p: f"{p.parent.parent.parent.name}/{p.name}")
def test_the_layout_path_reads_a_stripped_page_as_the_parser(page: Path) -> None:
    stripped = strip_comments(page.read_text(encoding="utf-8"))
    cache = LayoutCache(parse)
    parsed = parse(stripped, wanted=WANTED_FAMILIES)
    for _ in range(2):
        laid_out = cache.parse("t", stripped, wanted=WANTED_FAMILIES, max_samples=10**6)
        assert {k: laid_out[k] for k in laid_out} == parsed


# --- the rule, case by case -------------------------------------------------------------------------

HISTOGRAM = (
    'ttft_bucket{model="m",le="0.1"} 1\nttft_bucket{model="m",le="+Inf"} 3\nttft_count{model="m"} 3\n'
    'ttft_sum{model="m"} 0.9\n'
)


def _shape(fam: MetricFamily) -> tuple[str, list[tuple[str, dict[str, str], float]]]:
    return fam.type, [(s.name, s.labels, s.value) for s in fam.samples]


def test_untyped_buckets_beside_sum_and_count_are_a_histogram() -> None:
    typed = parse("# TYPE ttft histogram\n" + HISTOGRAM)
    for wanted in (None, {"ttft"}, lambda name: name == "ttft"):
        got = parse(HISTOGRAM, wanted=wanted)
        assert list(got) == ["ttft"]
        assert got["ttft"].type == "histogram"
        assert sorted(_shape(got["ttft"])[1], key=repr) == sorted(_shape(typed["ttft"])[1], key=repr)


def test_a_help_line_without_type_gives_the_histogram_its_help() -> None:
    got = parse("# HELP ttft Time to first token.\n" + HISTOGRAM)
    assert (got["ttft"].type, got["ttft"].help) == ("histogram", "Time to first token.")


def test_untyped_quantiles_beside_sum_and_count_are_a_summary() -> None:
    text = 'lat{quantile="0.5"} 0.2\nlat{quantile="0.9"} 0.7\nlat_sum 4\nlat_count 10\n'
    got = parse(text)
    assert list(got) == ["lat"]
    assert got["lat"].type == "summary"
    assert [s.name for s in got["lat"].samples] == ["lat", "lat", "lat_sum", "lat_count"]


def test_sum_and_count_alone_are_a_summary_without_quantiles() -> None:
    # prometheus_client's Summary writes no quantiles: `X_sum` and `X_count` are all of it
    got = parse("lat_sum 4\nlat_count 10\n")
    assert list(got) == ["lat"]
    assert got["lat"].type == "summary"


def test_untyped_buckets_alone_are_a_histogram() -> None:
    # a page cut inside a histogram keeps its first buckets only: vLLM 0.5.1's TTFT buckets in vllm-project/vllm
    # issue #6337 (tests/fixtures/metrics), TYPE histogram, no +Inf, _sum or _count. Stripped of its comment lines
    # the buckets still say what they are (le on every sample): histogram X, as the page with its TYPE line reads
    text = 'ttft_bucket{model="m",le="0.001"} 208\nttft_bucket{model="m",le="0.005"} 208\n'
    typed = parse("# TYPE ttft histogram\n" + text)
    for wanted in (None, {"ttft"}, lambda name: name == "ttft"):
        got = parse(text, wanted=wanted)
        assert list(got) == ["ttft"]
        assert _shape(got["ttft"]) == _shape(typed["ttft"])


def test_what_stays_as_written() -> None:
    # a counter stays X_total (readers find it there), X_created stays its own family as on a typed text page
    got = parse("req_total 5\nreq_created 1.7e9\n")
    assert {k: v.type for k, v in got.items()} == {"req_total": "unknown", "req_created": "unknown"}


AMBIGUOUS = [
    # a lone X_sum or X_count: a gauge as much as half of anything
    "lat_sum 4\n",
    "lat_count 10\n",
    # a bucket line without le
    'ttft_bucket{le="+Inf"} 3\nttft_bucket{x="y"} 3\nttft_count 3\n',
    # X itself on the page with samples, and not quantiles: X_sum and X_count may be anything
    "lat 1\nlat_sum 4\nlat_count 10\n",
    # X_count carries le: not a histogram's count
    'ttft_bucket{le="+Inf"} 3\nttft_count{le="1"} 3\n',
]


@pytest.mark.parametrize("text", AMBIGUOUS)
def test_parts_that_do_not_make_one_family_stay_as_written(text: str) -> None:
    got = parse(text)
    assert all(fam.type == "unknown" for fam in got.values())
    assert sum(len(fam.samples) for fam in got.values()) == text.count("\n")


def test_a_declared_type_wins() -> None:
    text = "# TYPE ttft_bucket gauge\n" + HISTOGRAM
    got = parse(text)
    assert got["ttft_bucket"].type == "gauge"
    assert "ttft" not in got
    # a typed X_count read for a wanted X (the parser reads every part) is not handed to the caller
    assert list(parse("# TYPE ttft_count gauge\nttft_count 3\n# TYPE ttft gauge\nttft 1\n", wanted={"ttft"})) == [
        "ttft"
    ]


def test_a_selective_read_keeps_only_what_it_asked_for() -> None:
    text = HISTOGRAM + 'other_bucket{le="1"} 1\nother_count 1\ngauge 2\n'
    assert list(parse(text, wanted={"ttft"})) == ["ttft"]
    assert list(parse(text, wanted={"ttft", "gauge"})) == ["ttft", "gauge"]
    # asking for a part by its own name gets it as written
    assert list(parse(text, wanted={"ttft_bucket"})) == ["ttft_bucket"]
    assert parse(text, wanted={"ttft_bucket"})["ttft_bucket"].type == "unknown"


# --- generated pages: the typed page and its stripped copy hold the same histograms and summaries ------------

_names = st.sampled_from(["a", "b:c", "vllm:ttft", "x_y", "lat"])
_labels = st.dictionaries(st.sampled_from(["model", "engine"]), st.sampled_from(["m", "n", ""]), max_size=2)
_values_st = st.sampled_from(["0", "1", "2.5", "1e3", "NaN"])


@st.composite
def typed_pages(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for name in draw(st.lists(_names, unique=True, max_size=4)):
        kind = draw(st.sampled_from(["histogram", "summary", "gauge", "counter"]))
        declared = name + "_total" if kind == "counter" else name  # as client libraries write a counter
        lines.append(f"# HELP {declared} {name} help")
        lines.append(f"# TYPE {declared} {kind}")
        for labels in draw(st.lists(_labels, unique_by=lambda d: tuple(sorted(d.items())), min_size=1, max_size=2)):
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            sep = "," if body else ""
            if kind == "histogram":
                for le in draw(st.sampled_from([["+Inf"], ["0.1", "+Inf"], ["1", "5", "+Inf"]])):
                    lines.append(f'{name}_bucket{{{body}{sep}le="{le}"}} {draw(_values_st)}')
            if kind == "summary":
                for q in draw(st.sampled_from([[], ["0.5"], ["0.5", "0.99"]])):
                    lines.append(f'{name}{{{body}{sep}quantile="{q}"}} {draw(_values_st)}')
            if kind in ("histogram", "summary"):
                lines.append(f"{name}_count{{{body}}} {draw(_values_st)}")
                lines.append(f"{name}_sum{{{body}}} {draw(_values_st)}")
            else:
                lines.append(f"{name}{'_total' if kind == 'counter' else ''}{{{body}}} {draw(_values_st)}")
    return "\n".join(lines) + "\n"


def _samples(fam: MetricFamily) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    return sorted((s.name, tuple(sorted(s.labels.items())), repr(s.value)) for s in fam.samples)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(typed_pages())
def test_generated_histograms_and_summaries_survive_the_comments_going(text: str) -> None:
    typed = parse(text)
    stripped = parse(strip_comments(text))
    for name, fam in typed.items():
        if fam.type in ("histogram", "summary"):
            assert stripped[name].type == fam.type
            assert _samples(stripped[name]) == _samples(fam)
        else:  # a gauge as unknown, a counter under its sample name X_total
            key = name + "_total" if fam.type == "counter" else name
            assert stripped[key].type == "unknown"
            assert _samples(stripped[key]) == _samples(fam)
    wanted = frozenset(typed)
    assert {k: _samples(v) for k, v in parse(strip_comments(text), wanted=wanted).items()} == {
        k: _samples(v) for k, v in stripped.items() if k in wanted
    }
