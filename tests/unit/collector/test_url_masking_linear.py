"""Masking a URL's secrets takes time linear in its length. A discovered pod's URL is built from its annotations
(``kvpilot.io/path``, up to the API server's 256 KiB), and kvpilot masks a target's URL wherever it shows it: every
/metrics render (``kvpilot_scrape_up``), ``GET /v1/targets``, the log line of a target going down. The regular
expression that found a secret query parameter took time quadratic in a run of ``?`` or of a name's characters:
a path of 64,000 ``?`` held the showing thread for 259 s (the GIL with it: /healthz, the KEDA service and the
loop stalled), of 16,000 for 15 s. The one that found URLs in a text (``masked_in``, a finding's summary) was
quadratic in a run of scheme characters (20,000: 0.5 s). Both now read the text once, with the same results: the
old expressions are the oracle here."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from collector.urls import _shown_in_text, masked_in, password_masked, redacted

# session 22's expressions (6ee10b2), the rule the one-pass readers keep
OLD_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;][^=&#;]*(?:pass|pwd|token|secret|key|auth|sig|credential|session)[^=&#;]*=)[^&#;]*", re.I
)
OLD_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")

BIG = 256 * 1024  # the API server's limit on a pod's annotations, all together


def _old_query_masked(url: str) -> str:
    return OLD_QUERY_SECRET.sub(r"\g<key>***", url)


def _old_masked_in(text: str) -> str:
    # the URLs the old expression found, each shown as masked_in shows a URL it found (a target's name: redacted)
    return OLD_URL_IN_TEXT.sub(lambda m: _shown_in_text(m.group()), text)


@pytest.mark.timeout(120)  # a hang guard: the quadratic reader needs hours for these
@pytest.mark.parametrize(
    "path",
    [
        "/m?a=" + "?" * BIG,  # a run of ? (each one started a name that ran to the end)
        "/m?a=1&" + "pass" * (BIG // 4),  # a name holding a secret word, never ended by =
        "/m?a=1&" + "x" * BIG,
        "/m?" + "?token" * (BIG // 6) + "=1",
    ],
    ids=["question-marks", "secret-word-run", "name-run", "nested-names"],
)
def test_a_discovered_path_of_256_kib_is_masked_in_one_pass(path: str) -> None:
    url = f"http://10.0.0.1:8000{path}"
    shown = redacted(url)
    assert len(shown) <= len(url) + 3
    assert password_masked(url).startswith("http://10.0.0.1:8000/m?")


@pytest.mark.timeout(120)
def test_a_summary_with_a_long_run_of_scheme_characters_is_masked_in_one_pass() -> None:
    text = "a" * BIG + "://"  # no URL: a scheme run with nothing after its ://
    assert masked_in(text) == text
    text = "1://" * (BIG // 4)  # many ://, none after a letter
    assert masked_in(text) == text
    text = "x " + "b" * BIG + "://h/m?token=t y"
    assert masked_in(text) == "x " + "b" * BIG + "://h/m?token=*** y"


QUERY = st.lists(st.sampled_from([*"?&;=#aPkTyx/:", "token", "pass", "key", "Sig", "?token="])).map("".join)


@given(QUERY)
@example("?redirect=/p?token=abc&x=1")  # a secret inside another parameter's value: still masked
@example("?token?x=abc")  # a name holding ? and a secret word
@example("?a=1&token=a=b?key=c;d=2#?auth=z")
def test_query_secrets_are_masked_as_before(query: str) -> None:
    url = f"http://h:1/m{query}"
    assert password_masked(url) == _old_query_masked(url)


TEXT = st.lists(st.sampled_from([*"ab1+.-:/ \"'<>?=@", "://", "http://", "token=", "x"])).map("".join)


@given(TEXT)
@example("see http://h/m?token=t and 1a2b://x?key=k, then 12://y")
@example("https://u:p@h/m?token=t#https://g/?sig=s")
@example("http://h/m?token=t and http://h/m?token=t.")  # a URL shown, then with a full stop after it
def test_urls_in_a_text_are_masked_as_before(text: str) -> None:
    assert masked_in(text) == _old_masked_in(text)
