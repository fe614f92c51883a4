"""A wanted family whose HELP and TYPE are followed by a single sample line is read inline (session 27, C): the
same samples, the same label dicts, and for a bad line the same error at the same line as the block reader gave."""

from __future__ import annotations

import pytest

from collector.exposition import ParseError, parse

WANTED = frozenset({"g", "h"})
HEAD_H = "# HELP h y\n# TYPE h gauge\nh 2\n"


@pytest.mark.parametrize(
    ("page", "line_no", "message"),
    [
        ('# HELP g x\n# TYPE g gauge\ng{a="1"} abc\n', 3, "invalid value 'abc'"),
        ('# HELP g x\n# TYPE g gauge\ng{a="1"} 1e\n', 3, "invalid value '1e'"),
        ('# HELP g x\n# TYPE g gauge\ng{__a="1"} 1\n', 3, "invalid label set"),
        (HEAD_H + '# HELP g x\n# TYPE g gauge\ng{a="1" b="2"} 1\n', 6, "invalid label set"),
    ],
)
def test_a_bad_only_line_is_reported_at_its_line(page: str, line_no: int, message: str) -> None:
    with pytest.raises(ParseError, match=message) as raised:
        parse(page, wanted=WANTED)
    assert raised.value.line_no == line_no
    # read around: the bad family is left out, the rest read as before
    partial = parse(page, wanted=WANTED, drop_bad_lines=True)
    assert [e.line_no for e in getattr(partial, "errors")] == [line_no]  # noqa: B009 (a PartialPage's)
    assert ("h" in partial) == page.startswith(HEAD_H)


def test_only_lines_read_inline_give_the_samples_and_label_dicts_of_their_own() -> None:
    page = (
        '# HELP g x\n# TYPE g counter\ng{a="1"} -Inf\n'
        '# HELP h y\n# TYPE h gauge\nh{a="1"} 2.5\n'
        "# HELP u z\n# TYPE u gauge\nu 7\n"  # not wanted
        "# HELP h_bucket w\n# TYPE h_bucket gauge\nh_bucket 3\n"  # a part of nothing typed: not read
    )
    families = parse(page, wanted=WANTED)
    assert sorted(families) == ["g", "h"]
    (g,), (h,) = families["g"].samples, families["h"].samples
    assert (g.name, g.labels, g.value) == ("g_total", {"a": "1"}, float("-inf"))
    assert (h.name, h.labels, h.value) == ("h", {"a": "1"}, 2.5)
    assert g.labels is not h.labels  # one body, two samples: each its own dict
    g.labels["a"] = "changed"
    assert h.labels == {"a": "1"}
