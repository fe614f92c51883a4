"""Answers to /metrics that are no exposition at all say what they are (issue 12, session 16 helper A).

Real answers: FastAPI's `{"detail":"Not Found"}` (SGLang 0.4.6 on a node without metrics, sgl-project/sglang issue
#7305), a Squid proxy's HTML error page in front of a MindIE server (gpustack/gpustack issue #1785), Go's
`404 page not found` (eko/pihole-exporter issue #33; gin, which Ollama serves with, answers the same). Before: the
JSON one was blamed on trtllm-serve ("answers /metrics with JSON iteration stats"), the others were "invalid metric
name". Only the error path is touched: a page that parses never reaches these checks.
"""

from __future__ import annotations

import pytest

from collector.exposition import ParseError, parse


def test_a_json_error_answer_is_named() -> None:
    # FastAPI's answer for a path it lacks; vLLM's OpenAI-style error object; an OpenAI-style {"error": ...}
    for body in (
        '{"detail":"Not Found"}',
        '{"object":"error","message":"The model does not exist.","type":"NotFoundError","param":null,"code":404}',
        '{"error": {"message": "Unauthorized", "type": "auth_error"}}',
    ):
        with pytest.raises(ParseError, match="an error answered in JSON") as raised:
            parse(body)
        assert "trtllm-serve" not in str(raised.value), body


def test_trtllm_serve_json_stats_keep_their_hint() -> None:
    with pytest.raises(ParseError, match="trtllm-serve answers /metrics with JSON"):
        parse('[{"iter": 3, "kvCacheStats": {"usedNumBlocks": 10}}]')


@pytest.mark.parametrize(
    "body",
    [
        '<!DOCTYPE html PUBLIC "-//W3C//DTD HTML 4.01//EN">\n<html><head><title>ERROR</title></head></html>\n',
        "<html>\n<head><title>502 Bad Gateway</title></head>\n</html>\n",
    ],
)
def test_an_html_page_is_named(body: str) -> None:
    with pytest.raises(ParseError, match="the page is HTML"):
        parse(body)


@pytest.mark.parametrize("body", ["404 page not found\n", "502 Bad Gateway\n"])
def test_an_http_error_text_is_named(body: str) -> None:
    with pytest.raises(ParseError, match="an HTTP error's text"):
        parse(body)


def test_a_bad_sample_line_is_still_diagnosed_as_before() -> None:
    with pytest.raises(ParseError, match="invalid metric name"):
        parse("# TYPE x gauge\n9x 1\n")


@pytest.mark.parametrize("body", ["Not Found", "Not Found\n", "Not Found\r\n"])
def test_a_starlette_error_text_is_named_not_read_as_a_sample(body: str) -> None:
    # Starlette answers a path it lacks with the plain text `Not Found` (Router.not_found's PlainTextResponse): it
    # reads as a sample `Not` valued `Found`, which was "invalid value 'Found'" (session 16's report); as the page's
    # first line the page is the error, with the read-around parse too
    for read in (parse, lambda text: parse(text, drop_bad_lines=True)):
        with pytest.raises(ParseError, match="an HTTP error's text") as raised:
            read(body)
        assert "invalid value" not in str(raised.value)


def test_the_same_words_further_down_a_page_are_one_bad_line() -> None:
    families = parse("# TYPE up gauge\nup 1\nNot Found\n", drop_bad_lines=True)
    assert families["up"].samples[0].value == 1.0
    errors: tuple[Exception, ...] = getattr(families, "errors", ())
    assert "invalid value 'Found'" in str(errors[0])


def test_the_json_404_names_sglangs_other_nodes() -> None:
    # sgl-project/sglang issue #7305: the second node of a two-node dp=2 server answers /metrics this way, until
    # pull request #7720 (July 2025) served metrics on every node
    with pytest.raises(ParseError, match=r"multi-node SGLang server only on its first node before .*#7720.*#7305"):
        parse('{"detail":"Not Found"}')
