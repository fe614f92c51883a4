"""One bad sample line loses its family, not the page: ``parse(..., drop_bad_lines=True)`` (collector/exposition/
_partial.py). Every other family reads exactly as on the page without the bad line; what was left out is on the
result. ``parse`` without the flag stays strict (test_exposition_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.adapt import WANTED_FAMILIES
from collector.exposition import LayoutCache, ParseError, parse
from collector.exposition._lex import NAME_RE
from collector.exposition._partial import MAX_BAD_NAMES, PartialPage, _belongs

_TESTS = Path(__file__).resolve().parents[2]
DIRS = (_TESTS / "fixtures" / "metrics", _TESTS.parent.parent / "shared" / "fixtures" / "metrics")
PAGES = sorted(p for d in DIRS if d.is_dir() for p in d.glob("*.txt"))

DCGM = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 41\nDCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b"} 43\n'
    "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
    'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} ERROR - FAILED TO CONVERT TO STRING\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b"} ERROR - FAILED TO CONVERT TO STRING\n'
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 88\nDCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 90\n'
)


def test_an_unconvertible_value_loses_its_family_not_the_page() -> None:
    with pytest.raises(ParseError, match="line 7"):
        parse(DCGM)  # strict: as before
    page = parse(DCGM, drop_bad_lines=True)
    assert isinstance(page, PartialPage)
    assert list(page) == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL"]
    assert [s.value for s in page["DCGM_FI_DEV_GPU_UTIL"].samples] == [88.0, 90.0]
    assert page.dropped == {"DCGM_FI_DEV_POWER_USAGE"}
    (error,) = page.errors  # both GPUs' lines were set aside at once: one error for the family
    assert error.line_no == 7
    # a selective read meets the bad line only when it wants its family
    assert not isinstance(parse(DCGM, wanted={"DCGM_FI_DEV_GPU_UTIL"}, drop_bad_lines=True), PartialPage)


def test_a_bad_gauge_named_like_a_part_loses_only_itself() -> None:
    # a gauge of its own whose name ends like a part (X_info, X_count) is not the healthy gauge X's part: was both lost
    for own in ("gpu_info", "gpu_count"):
        page = parse(f'# TYPE gpu gauge\ngpu{{a="1"}} 1\n# TYPE {own} gauge\n{own}{{a="1"}} x\n', drop_bad_lines=True)
        assert isinstance(page, PartialPage)
        assert (list(page), page.dropped) == (["gpu"], {own})
    # a part without a TYPE line of its own is still its family's (a bucket: the histogram, below)


def test_a_page_without_bad_lines_is_a_plain_dict() -> None:
    page = parse(DCGM.replace("ERROR - FAILED TO CONVERT TO STRING", "70"), drop_bad_lines=True)
    assert type(page) is dict
    assert len(page) == 3


def test_a_bad_histogram_bucket_loses_the_histogram() -> None:
    text = (
        "# TYPE ttft histogram\n"
        'ttft_bucket{le="0.1"} 1\nttft_bucket{le="+Inf"} x\nttft_sum 0.9\nttft_count 3\n'
        "# TYPE running gauge\nrunning 4\n"
    )
    page = parse(text, drop_bad_lines=True)
    assert list(page) == ["running"]
    assert isinstance(page, PartialPage)
    assert page.dropped == {"ttft"}


WHOLE_PAGE_FAULTS = [
    # a TYPE line decides where families begin: not guessed at
    "# TYPE m fancy\nm 1\n# TYPE n gauge\nn 1\n",
    "# TYPE m\nm 1\n",
    # a typed family carrying one series twice: which copy is right is unknowable
    "# TYPE m gauge\nm 1\nm 2\n",
]


@pytest.mark.parametrize("text", WHOLE_PAGE_FAULTS)
def test_what_still_loses_the_page(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text, drop_bad_lines=True)


def test_the_sample_cap_still_loses_the_page() -> None:
    with pytest.raises(ParseError, match="more than 2 samples") as caught:
        parse("a 1\nb 2\nc 3\n", drop_bad_lines=True, max_samples=2)
    assert caught.value.whole_page


def test_too_many_bad_names_lose_the_page() -> None:
    text = "".join(f"m{i} bad\n" for i in range(MAX_BAD_NAMES + 1)) + "ok 1\n"
    with pytest.raises(ParseError):
        parse(text, drop_bad_lines=True)
    assert list(parse("".join(f"m{i} bad\n" for i in range(MAX_BAD_NAMES)) + "ok 1\n", drop_bad_lines=True)) == ["ok"]


def test_openmetrics_stays_strict() -> None:
    with pytest.raises(ParseError):
        parse("# TYPE m gauge\nm one\n# EOF\n", openmetrics=True, drop_bad_lines=True)


def test_the_layout_cache_never_learns_a_page_it_read_around() -> None:
    # A layout learnt from such a page would pass over the bad line's family on later scrapes, even once it reads
    # again; so each scrape is parsed, and says what it left out.
    cache = LayoutCache(lambda text, **kw: parse(text, drop_bad_lines=True, **kw))
    for _ in range(3):
        page = cache.parse("dcgm", DCGM, wanted=None, max_samples=10_000)
        assert isinstance(page, PartialPage)
        assert page.dropped == {"DCGM_FI_DEV_POWER_USAGE"}
    assert cache.hits == 0
    fixed = DCGM.replace("ERROR - FAILED TO CONVERT TO STRING", "70")
    assert "DCGM_FI_DEV_POWER_USAGE" in cache.parse("dcgm", fixed, wanted=None, max_samples=10_000)


# --- fuzz: one sample line garbled, every other family as before ---------------------------------------------------

_GARBLES = [
    lambda line: line.rsplit(" ", 1)[0] + " ERROR - FAILED TO CONVERT TO STRING",  # dcgm-exporter's own
    lambda line: line.rsplit(" ", 1)[0] + " nan?",
    lambda line: line.rsplit(" ", 1)[0] + " 1_0",
    lambda line: line.rsplit(" ", 1)[0],  # the value cut off
    lambda line: line.replace("{", '{"', 1) if "{" in line else line + " 1 2 3",  # a stray quote
    lambda line: line.replace('="', "=", 1) if '="' in line else line + " x",  # an unquoted label value
]


def _sample_lines(text: str) -> list[int]:
    return [i for i, line in enumerate(text.split("\n")) if line.strip() and not line.lstrip().startswith("#")]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from(PAGES), st.data())
def test_one_garbled_line_loses_at_most_its_family(page: Path, data: st.DataObject) -> None:
    text = page.read_text(encoding="utf-8")
    candidates = _sample_lines(text)
    if not candidates:
        return
    lines = text.split("\n")
    at = data.draw(st.sampled_from(candidates))
    lines[at] = data.draw(st.sampled_from(_GARBLES))(lines[at])
    garbled = "\n".join(lines)
    name = NAME_RE.match(lines[at].lstrip())
    assert name is not None  # every garble keeps the line's metric name
    declared = name.group() in parse(text)  # a family of that very name (a gauge X_created beside histogram X)
    for wanted in (None, WANTED_FAMILIES):
        before = parse(text, wanted=wanted)
        after = parse(garbled, wanted=wanted, drop_bad_lines=True)  # never raises: the fault is the line's own
        # the family the line belongs to: the one of its very name where the page declares it, else by its suffix
        own = {name.group()} if declared else {f for f in [*before, *after] if _belongs(f, (name.group(),))}
        assert {k: v for k, v in after.items() if k not in own} == {k: v for k, v in before.items() if k not in own}
        if isinstance(after, PartialPage):  # the line was refused: its family is left out, and said so
            assert not own & set(after)
            assert own <= after.dropped
            assert [e.line_no for e in after.errors] == [at + 1]


def test_a_bad_created_gauge_line_leaves_its_histogram_whole() -> None:
    # prometheus_client writes a histogram's _created as a gauge family of its own: a bad line there loses that
    # gauge, not the histogram its name ends like (the case the fuzz above found once its `own` followed b54af33)
    page = next(p for p in PAGES if p.name.startswith("vllm-v1-current-dp2"))
    lines = page.read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:time_to_first_token_seconds_created{"))
    lines[at] = lines[at].rsplit(" ", 1)[0] + " ERROR - FAILED TO CONVERT TO STRING"
    after = parse("\n".join(lines), drop_bad_lines=True)
    assert isinstance(after, PartialPage)
    assert after.dropped == {"vllm:time_to_first_token_seconds_created"}
    assert (
        after["vllm:time_to_first_token_seconds"]
        == parse(page.read_text(encoding="utf-8"))["vllm:time_to_first_token_seconds"]
    )
