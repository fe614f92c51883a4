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
