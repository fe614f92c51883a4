"""The OpenMetrics parser against its oracle, prometheus_client.openmetrics.parser, differentially."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families
from prometheus_client.registry import CollectorRegistry

from collector.exposition import MetricFamily, ParseError, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
PAGES = sorted(FIXTURES.glob("*.txt"))

Canonical = dict[str, tuple[str, str, str, list[tuple[str, dict[str, str], Any, float | None]]]]


def _value(v: float) -> Any:
    return "NaN" if math.isnan(v) else v


def oracle(text: str) -> Canonical:
    out: Canonical = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name not in out  # OpenMetrics forbids a family twice
        samples = [
            (s.name, dict(s.labels), _value(float(s.value)), None if s.timestamp is None else float(s.timestamp))
            for s in fam.samples
        ]
        out[fam.name] = (fam.type, fam.documentation, fam.unit, samples)
    return out


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "histogram": ("_count", "_sum", "_bucket", "_created"),
    "gaugehistogram": ("_gcount", "_gsum", "_bucket"),
    "info": ("_info",),
}


def _declared(text: str) -> str:
    """``text`` with the sample names prometheus_client escapes (``vllm_x_bucket`` after ``# TYPE vllm:x histogram``)
    written as declared: the page the oracle reads as we read the escaped one (module notes of _openmetrics)."""
    out = []
    family, typ, escaped, seen = "", "", False, False
    for line in text.split("\n"):
        words = line.split(" ")
        if line.startswith("# ") and len(words) > 2 and words[1] in ("HELP", "TYPE", "UNIT"):
            if words[2] != family:
                family, typ, escaped, seen = words[2], "", False, False
            if words[1] == "TYPE" and len(words) > 3:
                typ = words[3]
        elif line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            allowed = [family + suffix for suffix in _SUFFIXES.get(typ, ("",))] if typ else [family]
            flat = family.replace(":", "_")
            declared = family + name[len(flat) :]
            if (
                name not in allowed
                and ":" in family
                and (escaped or not seen)
                and name.startswith(flat)
                and (declared in allowed)
            ):
                line, name, escaped = family + line[len(flat) :], declared, True
            if name not in allowed:  # a family of its own, untyped
                family, typ, escaped = name, "", False
            seen = True
        out.append(line)
    return "\n".join(out)


def canonical(families: dict[str, MetricFamily]) -> Canonical:
    return {
        k: (f.type, f.help, f.unit, [(s.name, s.labels, _value(s.value), s.timestamp) for s in f.samples])
        for k, f in families.items()
    }


def assert_agrees(text: str) -> None:
    assert canonical(parse(text, openmetrics=True)) == oracle(text)


# --- real pages, re-exposed as OpenMetrics by prometheus_client itself ----------------------------


class _Replay:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _as_openmetrics(page: Path, escaping: str = "allow-utf-8") -> str:
    """The page as prometheus_client serves it in OpenMetrics: with ``escaping="underscores"`` (what it answers an
    Accept naming OpenMetrics without an escaping) its sample names have ``:`` written ``_`` under metadata that keeps
    it (client_python#1177)."""
    families: dict[str, Metric] = {}
    for fam in text_families(page.read_text(encoding="utf-8")):
        families.setdefault(fam.name, fam)  # OpenMetrics allows each family once
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Replay(list(families.values())))  # type: ignore[arg-type]
    return generate_latest(registry, escaping=escaping).decode("utf-8")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_fixtures_as_openmetrics_agree(page: Path) -> None:
    text = _as_openmetrics(page)
    try:
        expected = oracle(text)
    except ValueError:
        # the trimmed fixtures break OpenMetrics rules (a histogram cut to one bucket): we must refuse too
        with pytest.raises(ParseError):
            parse(text, openmetrics=True)
        return
    assert canonical(parse(text, openmetrics=True)) == expected
    names = sorted(expected)
    wanted = frozenset(names[::2])
    assert canonical(parse(text, openmetrics=True, wanted=wanted)) == {k: expected[k] for k in wanted}
    # the same page with its sample names escaped reads the same (the oracle splits its histograms: module notes)
    escaped = _as_openmetrics(page, "underscores")
    assert canonical(parse(escaped, openmetrics=True)) == expected
    assert canonical(parse(escaped, openmetrics=True, wanted=wanted)) == {k: expected[k] for k in wanted}


# --- accepted edge cases ------------------------------------------------------------------------

EDGE_CASES = [
    # counter with _total, _created and an exemplar; HELP escapes
    '# TYPE c counter\n# HELP c A \\"quoted\\" \\\\ help\\n.\nc_total{a="b"} 1 # {id="x"} 2 3\nc_created 5\n# EOF\n',
    # histogram with a unit, buckets, sum, count and an exemplar on a bucket
    '# TYPE h_s histogram\n# UNIT h_s s\nh_s_bucket{le="0.5"} 1 # {} 0.2\nh_s_bucket{le="+Inf"} 3\nh_s_sum 1\n'
    "h_s_count 3\n# EOF\n",
    # summary with quantiles
    '# TYPE s summary\ns{quantile="0.5"} 1\ns{quantile="1"} 2\ns_sum 3\ns_count 4\n# EOF\n',
    # info and stateset
    '# TYPE i info\ni_info{v="1"} 1\n# TYPE ss stateset\nss{ss="a"} 1\nss{ss="b"} 0\n# EOF\n',
    # gaugehistogram
    '# TYPE gh gaugehistogram\ngh_bucket{le="+Inf"} 2\ngh_gcount 2\ngh_gsum 1\n# EOF',
    # samples without metadata, timestamps in several notations
    "u 1 1700000000\nu 2 1700000001.25\nv NaN 1.5e3\n# EOF\n",
    # a repeated series at the same timestamp is dropped (the oracle's duplicate rule)
    "d 1 5\nd 2 5\n# EOF\n",
    # escaped label values
    'e{a="x\\\\y\\"z\\n"} 1\n# EOF\n',
    # metadata with a quoted name and a trailing blank as HELP
    '# HELP "q" \n# TYPE q gauge\nq 1\n# EOF\n',
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_agree(text: str) -> None:
    assert_agrees(text)


REFUSED = [
    # (page, line named, what is wrong)
    ("m 1\n", 1, "EOF"),
    ("m 1\n\n# EOF\n", 2, "blank"),
    ("# EOF\nm 1\n", 2, "after"),
    ("# TYPE m gauge\nm 1\n# HELP m late\n# EOF\n", 3, "after samples"),
    ("# TYPE m untyped\n# EOF\n", 1, "untyped"),
    ('# TYPE h histogram\nh_bucket{le="1"} 1\n# EOF\n', 1, "+Inf"),
    ("# TYPE c counter\nc_total -1\n# EOF\n", 2, "negative"),
    ("# TYPE m gauge\n# UNIT m seconds\n# EOF\n", 1, "unit"),
    ('m{a="1"} 1\nm{a="2"} 1\nm{a="1"} 1\n# EOF\n', 3, "contiguous"),
    ("m 1\n# TYPE n gauge\nm 2\n# EOF\n", 3, "clashing"),
    ("m  1\n# EOF\n", 1, "expected"),
]


@pytest.mark.parametrize(("page", "line_no", "words"), REFUSED)
def test_refused_pages_name_the_line(page: str, line_no: int, words: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # the oracle refuses too, whatever its message
        list(text_string_to_metric_families(page))
    with pytest.raises(ParseError) as caught:
        parse(page, openmetrics=True)
    assert caught.value.line_no == line_no
    assert words.lower() in str(caught.value).lower()


DIVERGENCES = [
    # a blank before the value doubled: the oracle reads it as a value "" then fails; a blank before "{"
    # makes the oracle keep "m " (with the blank) as the sample name
    'm {a="b"} 1\n# EOF\n',
    # a negative timestamp above -1: the oracle's Timestamp loses the sign ("-0.5" reads +0.5)
    "m 1 -0.5\n# EOF\n",
]


@pytest.mark.parametrize("text", DIVERGENCES)
def test_divergences_are_refused(text: str) -> None:
    assert list(text_string_to_metric_families(text))  # the oracle accepts it by accident
    with pytest.raises(ParseError):
        parse(text, openmetrics=True)


# --- generated pages ---------------------------------------------------------------------------

label_names = st.sampled_from(["a", "b", "job", "l_1"])
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + body + "}" if labels else ""


counts = st.integers(0, 10**6)
any_values = st.one_of(st.floats(allow_nan=True).map(repr), st.sampled_from(["NaN", "+Inf", "-Inf", "0"]))
help_texts = st.text('ab \\n"', max_size=6)
stamps = st.one_of(st.none(), st.integers(0, 2 * 10**9).map(str), st.sampled_from(["1700000000.125", "5.5"]))


@st.composite
def families(draw: st.DrawFn, name: str) -> list[str]:
    typ = draw(st.sampled_from(["counter", "gauge", "histogram", "summary", "unknown", "bare"]))
    lines: list[str] = []
    if typ != "bare":
        lines.append(f"# TYPE {name} {typ}")
        if draw(st.booleans()):
            lines.append(f"# HELP {name} {draw(help_texts)}")
    stamp = draw(stamps)
    suffix = f" {stamp}" if stamp is not None else ""
    for group in draw(st.lists(st.dictionaries(label_names, label_values, max_size=2), max_size=3, unique_by=str)):
        g = _labels(group)
        if typ == "counter":
            exemplar = f' # {{id="{draw(st.text("xyz", max_size=3))}"}} 1' if draw(st.booleans()) else ""
            lines.append(f"{name}_total{g} {draw(counts)}{suffix}{exemplar}")
        elif typ == "histogram":
            low, high = sorted(draw(st.lists(counts, min_size=2, max_size=2)))
            for le, n in (("0.5", low), ("+Inf", high)):
                lines.append(f"{name}_bucket{_labels({**group, 'le': le})} {n}{suffix}")
            lines += [f"{name}_sum{g} {draw(counts)}{suffix}", f"{name}_count{g} {high}{suffix}"]
        elif typ == "summary":
            lines.append(f"{name}{_labels({**group, 'quantile': '0.9'})} {draw(counts)}{suffix}")
            lines += [f"{name}_sum{g} {draw(counts)}{suffix}", f"{name}_count{g} {draw(counts)}{suffix}"]
        else:
            lines.append(f"{name}{g} {draw(any_values)}{suffix}")
    return lines


@st.composite
def pages(draw: st.DrawFn) -> str:
    names = draw(st.lists(st.sampled_from(["a", "b_c", "d:e", "f", "g_h"]), unique=True, max_size=4))
    lines = [line for name in names for line in draw(families(name))]
    return "\n".join([*lines, "# EOF"]) + draw(st.sampled_from(["", "\n"]))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pages())
def test_generated_pages_agree(text: str) -> None:
    assert_agrees(text)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pages(), st.sets(st.sampled_from(["a", "b_c", "d:e", "f", "g_h"])))
def test_selective_read_is_the_full_read_filtered(text: str, wanted: set[str]) -> None:
    full = canonical(parse(text, openmetrics=True))
    assert canonical(parse(text, openmetrics=True, wanted=wanted)) == {k: v for k, v in full.items() if k in wanted}


_ALPHABET = 'ab_:{}=",# \t\n\\.01eE+-NaInfHELPTYPEUNITcountergaugehistogram'


@st.composite
def mutated_pages(draw: st.DrawFn) -> str:
    text = draw(pages())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.text(_ALPHABET, min_size=1, max_size=3))
        cut = draw(st.integers(0, 3))
        text = text[:at] + piece + text[at + cut :]
    return text


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_pages())
def test_mutated_pages_are_refused_or_agree(text: str) -> None:
    try:
        ours = canonical(parse(text, openmetrics=True))
    except ParseError:
        return
    assert ours == oracle(_declared(text))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_pages(), st.data())
def test_selective_read_of_mutated_pages_is_the_full_read_filtered(text: str, data: st.DataObject) -> None:
    try:
        full = canonical(parse(text, openmetrics=True))
    except ParseError:
        return
    wanted = frozenset(data.draw(st.sets(st.sampled_from(sorted(full) or ["none"]))))
    assert canonical(parse(text, openmetrics=True, wanted=wanted)) == {k: v for k, v in full.items() if k in wanted}


ESCAPED = [
    # prometheus_client's OpenMetrics with escaping=underscores: ":" written "_" in the samples, not the metadata
    '# HELP v:h TTFT.\n# TYPE v:h histogram\nv_h_bucket{le="1"} 1\nv_h_bucket{le="+Inf"} 2\nv_h_count 2\nv_h_sum 0.5\n'
    "v_h_created 1\n# EOF\n",
    '# TYPE v:c counter\nv_c_total{a="b"} 3\nv_c_created{a="b"} 1\n# TYPE v:g gauge\nv_g 7\n# EOF\n',
]


@pytest.mark.parametrize("text", ESCAPED)
def test_escaped_sample_names_read_as_the_declared_family(text: str) -> None:
    ours = canonical(parse(text, openmetrics=True))
    assert ours == oracle(_declared(text))  # as if the samples had been written under the declared name
    assert ours != oracle(text)  # the oracle makes each escaped sample name a family of its own
    assert all(":" in name for name in ours)


def test_a_family_with_declared_names_first_is_read_as_the_oracle_reads_it() -> None:
    text = "# TYPE v:g gauge\nv:g 1\nv_g 2\n# EOF\n"
    assert canonical(parse(text, openmetrics=True)) == oracle(text) == oracle(_declared(text))
