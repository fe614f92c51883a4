"""A PromQL URL's ``user:password@`` is sent as Basic auth and never written: every message of the PromQL source named
``self.url`` whole, so `kvpilot run` logged the password in each tick's "collection failed" line while Prometheus
was unreachable or failing (review G6, session 21: 15 lines in 45 s with ``admin:hunter2``)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from collector.clock import VirtualClock
from collector.discovery.promql import PromQLError, PromQLSource
from collector.scrape_http import FETCHERS, ScrapeError
from collector.urls import password_masked
from kvpilot.settings import SettingsError, load_settings
from tests.helpers.json_server import JsonServer
from tests.helpers.promql_loop import collection_failures

SECRET = "hunter2"


class Failing(JsonServer):
    """A Prometheus answering every request with ``status`` and ``body``; keeps each request's Authorization."""

    def __init__(self, status: int, body: bytes) -> None:
        self.authorizations: list[str | None] = []
        seen = self.authorizations

        def answer(_path: str, _body: bytes, head: Message) -> tuple[int, bytes]:
            seen.append(head.get("Authorization"))
            return status, body

        super().__init__(answer)


@pytest.fixture(params=[(500, b'{"status":"error","error":"boom"}'), (200, b"<html>Sign in</html>"), (200, b"[1, 2]")])
def failing(request: pytest.FixtureRequest) -> Iterator[Failing]:
    server = Failing(*request.param)
    yield server
    server.close()


def _no_secret(caplog: pytest.LogCaptureFixture) -> None:
    assert caplog.records
    assert SECRET not in caplog.text  # the messages and the traceback of the first
    for r in caplog.records:
        assert SECRET not in r.getMessage()
        assert SECRET not in str(r.exc_info[1] if r.exc_info else "")


async def test_a_failing_prometheus_is_named_without_its_password(
    failing: Failing, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:{failing.port}"
    failed = await collection_failures(url, tmp_path, caplog, interval_s=0.5, timeout_s=0.4, wait_s=20)
    assert failed
    assert f"http://admin:***@127.0.0.1:{failing.port}/api/v1/" in failed[0].getMessage()  # which one, and whose
    _no_secret(caplog)
    # the credentials are still sent
    assert f"Basic {base64.b64encode(f'admin:{SECRET}'.encode()).decode()}" in failing.authorizations


async def test_an_unreachable_prometheus_is_named_without_its_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://admin:{SECRET}@127.0.0.1:1"  # nothing listens on port 1
    failed = await collection_failures(url, tmp_path, caplog, interval_s=0.5, timeout_s=0.4, wait_s=20)
    assert failed
    assert "http://admin:***@127.0.0.1:1/api/v1/" in failed[0].getMessage()
    _no_secret(caplog)


@pytest.mark.parametrize("reader", ["thread", "process"])
async def test_every_error_of_the_source_leaves_the_password_out(reader: Any, failing: Failing) -> None:
    # over https too (httpx's client, not the plain one): a refused TLS handshake on the same server
    for scheme in ("http", "https"):
        source = PromQLSource(
            f"{scheme}://admin:{SECRET}@127.0.0.1:{failing.port}/",
            timeout_s=2.0,
            reader=reader,
            clock=VirtualClock(start=1_700_000_600.0),
        )
        try:
            with pytest.raises(PromQLError) as e:
                await source.collect_once()
        finally:
            await source.aclose()
        assert SECRET not in str(e.value)
        assert f"{scheme}://admin:***@127.0.0.1:{failing.port}" in str(e.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", f"http://admin:{SECRET}@[::1"),  # not a URL
        ("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", f"http://admin:{SECRET}@p\n"),  # white space around it
        ("KVPILOT_DATABASE_URL", f"postgresql://k:{SECRET}@db\n"),
    ],
)
def test_a_refused_url_setting_leaves_the_password_out(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__KIND", "promql")
    monkeypatch.setenv("KVPILOT_COLLECTOR__DISCOVERY__PROMQL_URL", "http://prometheus:9090")
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as e:
        load_settings()
    assert SECRET not in str(e.value)
    assert ":***@" in str(e.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://admin:hunter2@prom:9090", "http://admin:***@prom:9090"),
        ("postgresql+psycopg://k:p@ss/w@rd@db:5432/k", "postgresql+psycopg://k:***@db:5432/k"),  # to the last @
        ("http://admin@prom:9090", "http://admin@prom:9090"),  # no password: kept
        ("http://prom:9090/x", "http://prom:9090/x"),
        ("", ""),
    ],
)
def test_password_masked(url: str, shown: str) -> None:
    assert password_masked(url) == shown


@pytest.mark.parametrize("fetcher", sorted(FETCHERS))
@pytest.mark.parametrize("url", [f"http://u:{SECRET}@127.0.0.1:x/metrics", f"ftp://u:{SECRET}@127.0.0.1/metrics"])
async def test_a_scrape_targets_unusable_url_is_named_without_its_password(fetcher: str, url: str) -> None:
    # targets from discovery (a targets file, annotations) are not held to the API's no-credentials rule
    client = FETCHERS[fetcher]()
    try:
        with pytest.raises(ScrapeError) as e:
            await client.get(url, max_bytes=1024)
    finally:
        await client.aclose()
    assert SECRET not in str(e.value)  # named as redacted@127.0.0.1 where the URL is named at all
