"""The PromQL source's requests (issue 17): each query is sent as the form httpx would encode, but a query asked
again (every tick asks the same ones, only ``time`` moves) is not URL-encoded again; the names regex is built once."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import httpx
import pytest

from collector.discovery import promql
from collector.discovery.promql import PromQLSource
from collector.promql.series import names_regex

EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
LONG = 'sum by (namespace, deployment) (up{namespace=~"a|b",deployment=~"' + "|".join(f"chat-{i}" for i in range(99))


@pytest.mark.parametrize(
    "query",
    [
        LONG + '"})',  # a narrowed query: kept encoded
        'up{deployment!=""} == 0',  # a short one: encoded each time
        LONG + ' ü+&="})',  # characters the form must escape
    ],
)
async def test_each_request_is_the_form_httpx_would_send_and_a_long_query_is_encoded_once(
    query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["content-type"] == "application/x-www-form-urlencoded"
        bodies.append(request.read())
        return httpx.Response(200, content=EMPTY)

    encoded: list[str] = []
    real = promql.urlencode

    def counted(form: dict[str, str]) -> str:
        encoded.extend(form)
        return real(form)

    monkeypatch.setattr(promql, "urlencode", counted)
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    source = PromQLSource("http://prometheus:9090", mode="aggregates", client=client)
    for now in (1000.0, 1005.0, 1010.5):
        assert await source.query_vector(query, now) == []
    await client.aclose()
    for body, now in zip(bodies, (1000.0, 1005.0, 1010.5), strict=True):
        assert body == httpx.Request("POST", "http://x", data={"query": query, "time": now}).read()
        assert parse_qs(body.decode()) == {"query": [query], "time": [str(now)]}
    long = len(query) >= 256
    assert encoded.count("query") == (1 if long else 3)  # before: every request quoted the query anew
    assert encoded.count("time") == 3


def test_the_names_regex_is_built_once_per_set_of_families() -> None:
    wanted = frozenset({"vllm:num_requests_waiting", "vllm:request_success_total"})
    assert names_regex(wanted) is names_regex(sorted(wanted))
    assert names_regex(wanted) == "(?:vllm:num_requests_waiting|vllm:request_success)(?:_total|_bucket|_sum|_count)?"
