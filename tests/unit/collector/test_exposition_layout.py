"""Page layouts (collector.exposition.LayoutCache): a page read off its target's known layout is exactly the page
the parser reads, and a page that does not fit is parsed (and then agrees with the parser, errors included).

Differential throughout: the expected families come from the parser, and for full reads from prometheus_client
too, on the real pages of tests/fixtures/metrics with their values changed the way scrapes change them.
"""

from __future__ import annotations

import dataclasses
import random
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES, adapt_page
from collector.engines._read import page_shape
from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache, ParseError, parse
from collector.exposition._layout import MAX_MISSES
from collector.exposition._page import LaidOutPage
from collector.samples import TargetInfo
from tests.unit.collector.test_exposition_text import canonical, duplicated, oracle

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
PAGES = sorted(FIXTURES.glob("*.txt"))
_VALUE_RE = re.compile(r"^([^#\n][^\n]*?(?<=[ }]))([^ \n{}\"]+)$", re.MULTILINE)


def with_values(text: str, values: list[str] | None = None, seed: int = 0) -> str:
    """The page with every sample value replaced, in turn, by ``values`` (cycled) or by random numbers."""
    rng = random.Random(seed)
    pool = values or []
    counter = iter(range(10**9))

    def new(m: re.Match[str]) -> str:
        i = next(counter)
        value = pool[i % len(pool)] if pool else repr(round(rng.uniform(0, 1e6), rng.randint(0, 6)))
        return m[1] + value

    return _VALUE_RE.sub(new, text)


def read(cache: LayoutCache, text: str, wanted: frozenset[str] | None = WANTED_FAMILIES) -> object:
    return canonical(cache.parse("target", text, wanted=wanted, max_samples=DEFAULT_MAX_SAMPLES))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name[:60])
def test_a_page_read_off_its_layout_is_the_page_parsed(page: Path) -> None:
    text = page.read_text()
    cache = LayoutCache(parse)
    assert read(cache, text) == canonical(parse(text, wanted=WANTED_FAMILIES))  # learns the layout
    for seed in range(3):
        changed = with_values(text, seed=seed)
        assert read(cache, changed) == canonical(parse(changed, wanted=WANTED_FAMILIES))
    assert cache.hits == 3, "every fixture page has a layout, and pages that differ only in values fit it"


def test_a_page_read_off_its_layout_carries_the_shape_readers_would_work_out() -> None:
    text = (FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_text()
    cache = LayoutCache(parse)
    first = cache.parse("target", text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    assert page_shape(first) is None  # parsed, not read off a layout
    pages = [
        cache.parse("target", with_values(text, seed=s), wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
        for s in range(2)
    ]
    assert all(type(p) is LaidOutPage for p in pages)
    computed = tuple(f.shape for f in pages[0].values())
    assert page_shape(pages[0]) == computed
    assert page_shape(pages[1]) is page_shape(pages[0])
    assert page_shape(dict(pages[0])) == computed  # a plain dict of the same families: worked out, same answer


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name[:60])
def test_a_full_read_off_a_layout_agrees_with_prometheus_client(page: Path) -> None:
    text = page.read_text()
    cache = LayoutCache(parse)
    cache.parse("target", text, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
    changed = with_values(text, ["0", "1.5", "-2e-3", "+Inf", "NaN", "123456789", ".5", "-Inf"])
    expected = oracle(changed)
    if duplicated(expected):
        pytest.skip("the oracle keeps a duplicated series; the parser refuses it (test_exposition_divergences)")
    assert read(cache, changed, wanted=None) == expected
    # a page whose sample lines carry timestamps (Ascend's npu-exporter writes one on every line) has no layout for
    # a full read: a line read with a timestamp is parsed, not read off a layout (collector/exposition/_layout.py)
    stamped = any(sample[3] is not None for _type, _help, samples in expected.values() for sample in samples)
    assert cache.hits == (0 if stamped else 1)


VLLM = (FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt").read_text()
RUNNING = 'vllm:num_requests_running{model_name="facebook/opt-125m"}'


def _first_line(prefix: str) -> str:
    return next(line for line in VLLM.splitlines() if line.startswith(prefix))


def _learned() -> LayoutCache:
    """A cache that has learned the vLLM page's layout."""
    cache = LayoutCache(parse)
    cache.parse("target", VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    return cache


def _read_as_the_parser_reads(cache: LayoutCache, changed: str) -> None:
    """``changed`` through ``cache`` gives what the parser gives, or the parser's refusal, word for word."""
    try:
        expected = canonical(parse(changed, wanted=WANTED_FAMILIES))
    except ParseError as e:
        with pytest.raises(ParseError, match=re.escape(str(e))):
            cache.parse("target", changed, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    else:
        assert read(cache, changed) == expected


@pytest.mark.parametrize(
    "change",
    [
        # a second model appears: a new series in a wanted family
        lambda t: t.replace(_first_line(RUNNING), _first_line(RUNNING) + "\n" + RUNNING.replace("125m", "350m") + " 3"),
        # a series read goes away
        lambda t: t.replace(_first_line(RUNNING) + "\n", ""),
        # a label value of a series read changes
        lambda t: t.replace(RUNNING, RUNNING.replace("125m", "350m")),
        # ... to one as long: a line read that does not start as the layout's keeps all its characters
        lambda t: t.replace(RUNNING, RUNNING.replace("125m", "126m")),
        # a line read is a bare value: what is left of it without its start would pass for a value
        lambda t: t.replace(_first_line(RUNNING), "NaN"),
        # a timestamp appears on a line read
        lambda t: t.replace(_first_line(RUNNING), _first_line(RUNNING) + " 1700000000000"),
        # values the fast path does not take: hex, digit separators, a word
        lambda t: t.replace(_first_line(RUNNING), RUNNING + " 0x10"),
        lambda t: t.replace(_first_line(RUNNING), RUNNING + " 1_0"),
        lambda t: t.replace(_first_line(RUNNING), RUNNING + " infinity"),
        # a family's HELP text changes
        lambda t: t.replace("# HELP vllm:num_requests_running ", "# HELP vllm:num_requests_running Now: "),
        # a line turns malformed
        lambda t: t.replace(_first_line(RUNNING), RUNNING[:-1] + " 1"),
        # CRLF line ends
        lambda t: t.replace("\n", "\r\n"),
        # a comment changes to one as long (the pinned lines are compared joined, the lines checked by length)
        lambda t: t.replace("# HELP vllm:num_requests_running N", "# HELP vllm:num_requests_running n"),
        # a skipped line's name changes, to one as long (what follows its start may change, its start may not)
        lambda t: t.replace("\nprocess_cpu_seconds_total ", "\nprocess_cpu_seconds_totax "),
        # a skipped line turns into a series of a family read
        lambda t: t.replace(_first_line("process_cpu_seconds_total"), RUNNING.replace("125m", "350m") + " 3"),
    ],
)
def test_a_page_that_does_not_fit_is_parsed(change: object) -> None:
    cache = _learned()
    changed = change(VLLM)  # type: ignore[operator]
    assert changed != VLLM
    _read_as_the_parser_reads(cache, changed)
    assert cache.hits == 0


def test_lines_that_are_skipped_may_change_beyond_their_values() -> None:
    # Python's GC series are not read: new label values there leave the layout as it was.
    text = "\n".join(
        [
            "# TYPE python_gc_objects_collected_total counter",
            'python_gc_objects_collected_total{generation="0"} 1.0',
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{model_name="m"} 2.0',
            "",
        ]
    )
    cache = LayoutCache(parse)
    cache.parse("target", text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    changed = text.replace('generation="0"} 1.0', 'generation="7",extra="x"} 9 123').replace("2.0", "5")
    assert read(cache, changed) == canonical(parse(changed, wanted=WANTED_FAMILIES))
    assert cache.hits == 1


def test_a_source_whose_layout_keeps_changing_stops_being_learnt() -> None:
    cache = LayoutCache(parse)
    for i in range(20):  # a new series every page
        extra = f'vllm:num_requests_running{{model_name="m{i}"}} 1'
        text = VLLM.replace(_first_line(RUNNING), _first_line(RUNNING) + "\n" + extra)
        assert read(cache, text) == canonical(parse(text, wanted=WANTED_FAMILIES))
    assert cache.learnt == MAX_MISSES
    assert cache.hits == 0


def test_every_target_has_its_own_layout() -> None:
    cache = LayoutCache(parse)
    other = (FIXTURES / "sglang__DataDog__integrations-core__sglang_metrics.txt").read_text()
    for _ in range(2):
        assert canonical(cache.parse("a", VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)) == canonical(
            parse(VLLM, wanted=WANTED_FAMILIES)
        )
        assert canonical(cache.parse("b", other, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)) == canonical(
            parse(other, wanted=WANTED_FAMILIES)
        )
    assert cache.hits == 2


_PLAIN = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?Inf|NaN")
_VALUES = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["+Inf", "-Inf", "NaN", "1e3", "1E-3", ".5", "5.", "-0", "0x1", "1_0", "inf", "nan", "", " 1"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_VALUES, min_size=1, max_size=12))
def test_any_values_read_off_a_layout_agree_with_the_parser(values: list[str]) -> None:
    cache = _learned()
    _read_as_the_parser_reads(cache, with_values(VLLM, values))
    fits = all(_PLAIN.fullmatch(v) for v in values)
    assert cache.hits == fits, "plain numbers are read off the layout, anything else is parsed"


@pytest.mark.parametrize("value", ["1-2", "e5", ".", "1e", "+", "--1", "1.2.3", "1e+", "-.e1", "5e3e1", "+-0", "E"])
def test_a_value_of_decimal_characters_that_is_no_number_is_parsed_not_read_off_the_layout(value: str) -> None:
    # made of digits, points, signs and exponents only, yet no number: float() refuses it, as the parser does
    cache = _learned()
    _read_as_the_parser_reads(cache, VLLM.replace(_first_line(RUNNING), f"{RUNNING} {value}"))
    assert cache.hits == 0


@pytest.mark.parametrize("values", [["+Inf"], ["1", "NaN"], ["2.5e-3", "-Inf", "7", "+Inf", "NaN", "-0", ".5", "5."]])
def test_decimals_beside_inf_and_nan_are_read_off_the_layout(values: list[str]) -> None:
    cache = _learned()
    changed = with_values(VLLM, values)
    assert read(cache, changed) == canonical(parse(changed, wanted=WANTED_FAMILIES))
    assert cache.hits == 1


# Value strings the text format has (decimals with signs, points and exponents, Inf, NaN) and strings float() takes
# that it has not (hex, digit separators, Python's spellings of infinity and NaN, other scripts' digits, blanks).
_FORMAT_AND_FLOAT_ONLY = [
    *("+Inf", "-Inf", "Inf", "NaN", "1e3", "1E-3", "-1.5e+10", ".5", "5.", "+.5e-3", "-0", "+0.0", "00012", "1e400"),
    *("4.9e-325", "0x10", "0x1p3", "1_000", "1_0.5", "1e1_0", "inf", "-inf", "+inf", "infinity", "-Infinity", "nan"),
    *("-nan", "+NaN", "INF", "Nan", "+Nan", "-NaN", "\u0661", "1\u0662", "\u00a01", "1\u2009", "0b1", "1j", " 1", ""),
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=st.one_of(
        st.text(alphabet="-+.017eE", max_size=9),  # the characters float() alone checks on the fast path
        st.text(alphabet="-+.09eEInfaNi_xp", max_size=8),
        st.sampled_from(_FORMAT_AND_FLOAT_ONLY),
    )
)
def test_any_value_string_reads_off_a_layout_exactly_as_the_parser_reads_it(value: str) -> None:
    # the same number to the bit (-0.0 is not 0.0 here), or the same refusal; read off the layout when and only
    # when it is a plain number of the format
    cache = _learned()
    changed = VLLM.replace(_first_line(RUNNING), f"{RUNNING} {value}")
    try:
        parsed = parse(changed, wanted=WANTED_FAMILIES)
    except ParseError as e:
        with pytest.raises(ParseError, match=re.escape(str(e))):
            cache.parse("target", changed, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
        assert cache.hits == 0
        return
    laid_out = cache.parse("target", changed, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    assert canonical(laid_out) == canonical(parsed)
    family = "vllm:num_requests_running"
    assert [repr(s.value) for s in laid_out[family].samples] == [repr(s.value) for s in parsed[family].samples]
    assert cache.hits == (_PLAIN.fullmatch(value) is not None)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name[:60])
def test_adapted_pages_read_off_a_layout_equal_parsed_ones(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the adapters' plans for families read off a layout (collector/engines/_read.py) included
    import collector.adapt

    layouts = LayoutCache(parse)
    monkeypatch.setattr(collector.adapt, "_layouts", layouts)
    text = page.read_text()
    kind = "gpu" if page.name.startswith("dcgm") else "engine"
    target = TargetInfo(url=f"http://layout-test/{page.name}", kind=kind, namespace="ns", deployment="d", pod="p")
    for seed in range(4):
        changed = with_values(text, seed=seed)
        # the same page read by a target seen for the first time: parsed (prefix found as on the first scrape)
        fresh = dataclasses.replace(target, url=f"{target.url}?fresh={seed}")
        monkeypatch.setattr(collector.adapt, "_layouts", LayoutCache(parse))  # knows no layout: parses
        try:
            expected = adapt_page(changed, fresh, 2.0 + seed)
        except ValueError as e:
            monkeypatch.setattr(collector.adapt, "_layouts", layouts)
            with pytest.raises(ValueError, match=re.escape(str(e))):
                adapt_page(changed, target, 2.0 + seed)
        else:
            monkeypatch.setattr(collector.adapt, "_layouts", layouts)
            assert adapt_page(changed, target, 2.0 + seed) == expected
    if kind == "engine" and layouts.learnt:
        assert layouts.hits >= 2, "pages after the first (or, behind a prefix found, the second) read off the layout"


def test_sources_with_one_layout_share_it() -> None:
    cache = LayoutCache(parse)
    for source in ("a", "b"):
        cache.parse(source, VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    a = cache.parse("a", VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    b = cache.parse("b", with_values(VLLM), wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    assert cache.hits == 3  # b's first page already fitted the layout a's page taught
    assert cache.learnt == 1
    assert [f.shape for f in a.values()] == [f.shape for f in b.values()]
    assert all(f.shape is not None for f in a.values())


def test_a_layout_is_taken_over_only_for_the_selection_it_was_learnt_with() -> None:
    cache = LayoutCache(parse)
    cache.parse("a", VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    everything = cache.parse("b", VLLM, wanted=None, max_samples=DEFAULT_MAX_SAMPLES)
    assert canonical(everything) == canonical(parse(VLLM))
    assert cache.learnt == 2


def test_a_page_over_the_sample_cap_is_refused_even_with_a_known_layout() -> None:
    cache = LayoutCache(parse)
    cache.parse("target", VLLM, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    with pytest.raises(ParseError, match="more than 5 samples"):
        parse(VLLM, wanted=WANTED_FAMILIES, max_samples=5)
    with pytest.raises(ParseError, match="more than 5 samples"):
        cache.parse("target", VLLM, wanted=WANTED_FAMILIES, max_samples=5)
    with pytest.raises(ParseError, match="more than 5 samples"):
        cache.parse("other", VLLM, wanted=WANTED_FAMILIES, max_samples=5)


def test_a_page_read_off_its_layout_is_its_values_until_a_family_is_looked_up(samples_built: list[object]) -> None:
    # the planned readers take a laid-out page's values by position: adapting a vLLM page builds no Sample, and a
    # family looked up is built once, from the same values
    from collector.adapt import adapt_families
    from collector.engines._read import family_values

    built = samples_built
    cache = LayoutCache(parse)
    target = TargetInfo(url="http://t/metrics", kind="engine", namespace="ns", deployment="d", pod="p")
    for seed in range(3):  # the first page is parsed and the second planned by; the third is read by the plans
        built.clear()
        changed = with_values(VLLM, seed=seed)
        page = cache.parse("target", changed, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
        assert adapt_families(page, target, 1.0) == adapt_families(parse(changed, wanted=WANTED_FAMILIES), target, 1.0)
    assert type(page) is LaidOutPage
    assert cache.hits == 2
    assert built == []
    running = page["vllm:num_requests_running"]
    assert len(built) == len(running.samples) > 0
    assert page["vllm:num_requests_running"] is running  # built once
    for name, family in page.items():
        assert list(family_values(page, name)) == [s.value for s in family.samples]


def test_a_bad_value_on_a_line_the_parser_reads_but_returns_nothing_of_is_not_read_off_the_layout() -> None:
    # An x_count with no "# TYPE" may belong to a wanted histogram x: the parser reads its value (a bad one is an
    # error) though alone it makes no sample. The layout took it for a skipped line, pinning only its name, so a
    # later page with garbage there fit it and read clean where the parser refuses it (hypothesis found it on the
    # vLLM 0.5.3 excerpt, tests/fixtures/metrics/vllm-0.5.3-70b-lines__...).
    good = (
        'vllm:time_to_first_token_seconds_count{model_name="m"} 8060.0\n\n'
        'vllm:request_success_total{finished_reason="stop",model_name="m"} 3810.0\n'
    )
    bad = good.replace("8060.0", "ERROR - FAILED TO CONVERT TO STRING")
    with pytest.raises(ParseError):
        parse(bad, wanted=WANTED_FAMILIES)
    cache = LayoutCache(parse)
    for page in (good, good.replace("8060.0", "8061.0")):
        assert read(cache, page) == canonical(parse(page, wanted=WANTED_FAMILIES))
    assert cache.hits == 1  # a new value there still fits the layout
    with pytest.raises(ParseError):
        cache.parse("target", bad, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)


# A page off its layout is told from one on it without splitting it into lines: the layout steps over what it pins by
# its length and takes each checked line's rest up to its newline, then rebuilds the page from the two. The tests below
# move lengths and newlines about while keeping the page's length, which is what that could miss.


@pytest.mark.parametrize("width", [1, 2, 7, 24])
def test_values_of_any_width_are_read_off_the_layout(width: int) -> None:
    # every value of every sample line, read and skipped, takes another width: what the layout pins moves in the page
    cache = _learned()
    values = ["7" * width, "-" + "1" * width, "0." + "5" * width, "NaN", "+Inf"]
    changed = with_values(VLLM, values)
    assert read(cache, changed) == canonical(parse(changed, wanted=WANTED_FAMILIES))
    assert cache.hits == 1


@pytest.mark.parametrize(
    "change",
    [
        # two lines become one and another becomes two: as many lines, as many characters
        lambda t: t.replace("\n# TYPE vllm:num_requests_running", " # TYPE vllm:num_requests_running", 1).replace(
            "# HELP vllm:num_requests_waiting Number", "# HELP vllm:num_requests_waiting\nNumber", 1
        ),
        # a value read gains a digit and a pinned line loses a character: as long a page, a pinned line not its own
        lambda t: t.replace(_first_line(RUNNING), _first_line(RUNNING) + "1", 1).replace(
            "\n# HELP vllm:num_requests_waiting N", "\n# HELP vllm:num_requests_waiting ", 1
        ),
        # a character moves from a pinned line into a skipped line's rest
        lambda t: t.replace("# HELP vllm:num_requests_running N", "# HELP vllm:num_requests_running ", 1).replace(
            "\nprocess_cpu_seconds_total ", "\nprocess_cpu_seconds_total  ", 1
        ),
        # the last line's last character turns into a newline (the page ends without one), or a newline is added
        lambda t: t[:-1] + "\n",
        lambda t: t + "\n",
        # a line is added at the top
        lambda t: "# a comment\n" + t,
    ],
)
def test_a_page_with_its_lengths_kept_but_its_lines_moved_is_parsed(change: object) -> None:
    cache = _learned()
    changed = change(VLLM)  # type: ignore[operator]
    assert changed != VLLM
    _read_as_the_parser_reads(cache, changed)
    assert cache.hits == 0


_EDITS = st.sampled_from(
    ["\n", " ", "\t", "{", "}", "#", '"', "=", ",", ".", "0", "9", "e", "+", "-", "_", ":", "x", "\r"]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(["insert", "delete", "replace"]), _EDITS),
        min_size=1,
        max_size=3,
    )
)
def test_a_page_edited_anywhere_reads_as_the_parser_reads_it(edits: list[tuple[float, str, str]]) -> None:
    # characters put in, taken out or replaced anywhere, newlines included: the same families, or the same refusal
    changed = VLLM
    for where, how, char in edits:
        at = int(where * len(changed))
        if how == "insert":
            changed = changed[:at] + char + changed[at:]
        elif how == "delete":
            changed = changed[:at] + changed[at + 1 :]
        else:
            changed = changed[:at] + char + changed[at + 1 :]
    _read_as_the_parser_reads(_learned(), changed)


@pytest.mark.parametrize(
    "text",
    [
        'vllm:num_requests_running{model_name="m"} 1',  # a sample line first and last, no newline at the end
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 1\n\n',
        "# TYPE vllm:num_requests_running gauge\n# HELP vllm:num_requests_running Running.\n",  # no sample at all
        "",
    ],
)
def test_layouts_of_pages_that_begin_or_end_on_any_line_read_as_the_parser_reads(text: str) -> None:
    cache = LayoutCache(parse)
    cache.parse("target", text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
    assert read(cache, text) == canonical(parse(text, wanted=WANTED_FAMILIES))
    hits = cache.hits
    for changed in (text.replace(" 1", " 22"), text + "\n", text + "x", text[:-1], "\n" + text, " " + text):
        if changed != text:
            _read_as_the_parser_reads(cache, changed)
    assert hits == 1
    assert cache.hits == hits + (" 1" in text)  # only a new value there fits the layout


def _many_lines(n: int) -> str:
    """A page of ``n`` series read, each after a line skipped: 2n lines, a layout walked in several regexes."""
    head = "# TYPE vllm:num_requests_running gauge\n"
    return head + "".join(f'z 1\nvllm:num_requests_running{{model_name="m{i}"}} {i % 7}\n' for i in range(n))


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace('"m9000"} 4', '"m9000"} 4.125e3'),  # a value in a later regex's part, wider: fits
        lambda t: t.replace('"m9000"}', '"m9001"}'),  # a label there: parsed (a duplicate series: refused)
        lambda t: t.replace('"m9000"}', '"n9000"}'),  # ... as long, different: parsed
        lambda t: t.replace(
            'z 1\nvllm:num_requests_running{model_name="m4096"}', 'z 1 vllm:num_requests_running{model_name="m4096"}'
        ),
        lambda t: t.replace("\nz 1\n", "\nz 123\n", 5000),  # skipped lines' rests, wider: fits
        lambda t: t.replace("\nz 1\n", "\ny 1\n", 1),  # a skipped line's name: parsed
        lambda t: t[:-1],  # the last newline
        lambda t: t + "z 1\n",  # a line more at the end
        lambda t: t[:-2] + "99\n",  # the last value, wider
    ],
)
def test_a_layout_of_thousands_of_lines_reads_as_the_parser_reads(change: object) -> None:
    """A layout too large for one regex (``_STEPS_PER_REGEX`` rests each) reads, and refuses, as one regex would."""
    text = _many_lines(10_000)
    cache = LayoutCache(parse)
    assert read(cache, text) == canonical(parse(text, wanted=WANTED_FAMILIES))
    assert read(cache, with_values(text, seed=1)) == canonical(parse(with_values(text, seed=1), wanted=WANTED_FAMILIES))
    assert cache.hits == 1
    _read_as_the_parser_reads(cache, change(text))  # type: ignore[operator]


def test_learning_the_layout_of_a_page_of_many_lines_takes_memory_in_proportion() -> None:
    """One regex for a page of 16,384 lines made re's compiler take 31.9 MiB at its peak (its parse tree grows faster
    than the pattern); in parts of _STEPS_PER_REGEX rests, the whole learn peaks at 15.7 MiB."""
    text = "z 1\n" * 16_383 + "z 1"
    parse(text, wanted=WANTED_FAMILIES)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        cache = LayoutCache(parse)
        cache.parse("target", text, wanted=WANTED_FAMILIES, max_samples=DEFAULT_MAX_SAMPLES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cache.learnt == 1
    assert read(cache, text.replace("z 1\n", "z 22\n", 99)) == canonical(parse(text, wanted=WANTED_FAMILIES))
    assert cache.hits == 1
    assert peak - before < 24 * 2**20
