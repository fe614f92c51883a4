"""The lean HTTP/1.1 fetcher's connection handling against a raw asyncio server on loopback: keep-alive
reuse, a kept-alive connection the server dropped, chunked and close-delimited bodies, bad responses."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.scrape_http import ScrapeError, StreamFetcher, _prepare
from tests.helpers.poll import until
from tests.helpers.raw_servers import KeptAlive

BODY = b"# TYPE up gauge\nup 1\n"


@dataclass
class RawServer:
    """Answers each request with ``responses[mode]``; counts connections; can drop a connection after
    one response while claiming keep-alive (what an idle timeout on the target does)."""

    mode: str = "keepalive"
    connections: int = 0
    url: str = ""
    server: asyncio.base_events.Server | None = None
    raw_reply: bytes = b""
    seen: list[bytes] = field(default_factory=list)

    def reply(self) -> bytes:
        if self.mode == "raw":
            return self.raw_reply
        if self.mode == "chunked":
            chunks = [BODY[:7], BODY[7:]]
            payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + payload
        if self.mode == "close-delimited":
            return b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + BODY
        if self.mode == "gzip":
            z = gzip.compress(BODY)
            return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(z), z)
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n%s" % (
            len(BODY),
            BODY,
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                self.seen.append(request)
                writer.write(self.reply())
                await writer.drain()
                if self.mode in ("drop-after-one", "close-delimited", "raw"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    srv = RawServer()
    srv.server = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{srv.server.sockets[0].getsockname()[1]}/metrics"
    async with srv.server:
        yield srv


async def test_keep_alive_reuses_one_connection(raw: RawServer) -> None:
    fetcher = StreamFetcher()
    for _ in range(3):
        assert await fetcher.get(raw.url, max_bytes=1024) == (BODY, "text/plain; version=0.0.4")
    await fetcher.aclose()
    assert raw.connections == 1
    assert b"Host: 127.0.0.1:" in raw.seen[0]
    assert b"User-Agent: kvpilot" in raw.seen[0]


async def test_concurrent_scrapes_of_one_address_keep_their_connections(raw: RawServer) -> None:
    # four targets behind one address, scraped together twice: four connections, all reused
    fetcher = StreamFetcher(max_idle_per_host=4)
    for _ in range(2):
        await asyncio.gather(*(fetcher.get(raw.url, max_bytes=1024) for _ in range(4)))
    await fetcher.aclose()
    assert raw.connections == 4


async def test_dropped_keep_alive_connection_is_retried_once_fresh(raw: RawServer) -> None:
    raw.mode = "drop-after-one"
    fetcher = StreamFetcher()
    assert (await fetcher.get(raw.url, max_bytes=1024))[0] == BODY
    (held,) = [c for conns in fetcher._idle.values() for c in conns]  # the fetcher still holds the connection
    await until(held.reader.at_eof, what="the server's close reached the held connection", timeout_s=10)
    assert (await fetcher.get(raw.url, max_bytes=1024))[0] == BODY
    await fetcher.aclose()
    assert raw.connections == 2


BODY_CASES = [
    "chunked",  # Transfer-Encoding: chunked, reassembled
    "close-delimited",  # HTTP/1.0 without Content-Length: read to EOF, connection not kept
    "gzip",  # gzip inflated
]


@pytest.mark.parametrize("mode", BODY_CASES)
async def test_body_framings(raw: RawServer, mode: str) -> None:
    raw.mode = mode
    fetcher = StreamFetcher()
    assert (await fetcher.get(raw.url, max_bytes=1024))[0] == BODY
    assert (await fetcher.get(raw.url, max_bytes=1024))[0] == BODY
    await fetcher.aclose()


BAD_CASES = [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),  # something else listens on the port
    (b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n", "bad Content-Length"),  # garbage framing
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "bytes before the end of the body"),  # truncated
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),  # bad chunk header
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx", "unsupported Content-Encoding"),
    (b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", "HTTP 302"),  # redirects not followed
    # Latin-1 '²' is a digit to str.isdigit() and not to int(): these were ValueErrors ("unreadable page: invalid
    # literal for int()"), not the scrape errors that name them
    (b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nab", "bad Content-Length"),
    (b"HTTP/1.1 2\xb20 OK\r\nContent-Length: 2\r\n\r\nab", "not an HTTP response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\nab", "bad Content-Length"),  # int() refuses
    # a negative chunk size was read as "until the connection closes", uncapped
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n" + b"x" * 4096, "bad chunk size"),
]


@pytest.mark.parametrize(("reply", "reason"), BAD_CASES)
async def test_bad_responses_are_named(raw: RawServer, reply: bytes, reason: str) -> None:
    raw.mode, raw.raw_reply = "raw", reply
    fetcher = StreamFetcher()
    with pytest.raises(ScrapeError, match=reason):
        await fetcher.get(raw.url, max_bytes=1024)
    await fetcher.aclose()


async def test_a_negative_chunk_size_is_refused_before_reading_on() -> None:
    # Before: StreamReader.read(-1) reads until the peer closes, so a target that answered a chunk size of -1 and
    # kept sending was read into memory past max_bytes for as long as the scrape's timeout allowed.
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
        with contextlib.suppress(ConnectionError):
            for _ in range(64):  # 4 MB, 4,000 times the cap, and the connection left open
                writer.write(b"x" * 65536)
                await writer.drain()
            await reader.read()  # until the fetcher hangs up
        writer.close()

    server = await asyncio.start_server(endless, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
    fetcher = StreamFetcher()
    async with server:
        with pytest.raises(ScrapeError, match="bad chunk size"):
            async with asyncio.timeout(5):
                await fetcher.get(url, max_bytes=1024)
        await fetcher.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=st.binary(max_size=300))
async def test_any_reply_gives_a_body_or_a_scrape_error(raw: RawServer, reply: bytes) -> None:
    # whatever the peer sends, the outcome is a body or ScrapeError, never another exception or a hang
    raw.mode, raw.raw_reply = "raw", reply
    fetcher = StreamFetcher()
    try:
        async with asyncio.timeout(5):
            await fetcher.get(raw.url, max_bytes=1024)
    except ScrapeError:
        pass
    finally:
        await fetcher.aclose()


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("/指标", b"/%E6%8C%87%E6%A0%87"),  # UTF-8, percent-encoded (RFC 3986 2.5, RFC 3987 3.1)
        ("/a b?q=é x&y=%41", b"/a%20b?q=%C3%A9%20x&y=%41"),  # an escape already made is kept
        ("/m;v=1:@!$&'()*+,=?a=/b?c", b"/m;v=1:@!$&'()*+,=?a=/b?c"),  # what a path and query may hold: as written
        ("/metrics?x=\x00", b"/metrics?x=%00"),  # a control character is never written raw into the request line
    ],
)
async def test_the_request_line_is_what_httpx_sends(raw: RawServer, path: str, sent: bytes) -> None:
    url = raw.url.removesuffix("/metrics") + path
    fetcher = StreamFetcher()
    try:
        await fetcher.get(url, max_bytes=1024)
    finally:
        await fetcher.aclose()
    assert raw.seen[0].split(b"\r\n")[0] == b"GET " + sent + b" HTTP/1.1"
    if path.isprintable():  # (httpx refuses a control character in a URL)
        assert httpx.URL(url).raw_path == sent  # the other backend sends the same


async def test_an_internationalised_host_is_sent_in_its_idna_form() -> None:
    key, request = _prepare("http://user:pw@Bücher.example:8080/metrics")
    assert key == ("http", "bücher.example", 8080)  # resolved by the connection, which applies IDNA itself
    assert b"\r\nHost: xn--bcher-kva.example:8080\r\n" in request


def _page(path: bytes, *, length: int | None = None, tail: bytes = b"") -> bytes:
    body = b'# HELP up Up \xe2\x80\x94 \xc3\xbc\n# TYPE up gauge\nup{path="' + path + b'"} 1\n'
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s%s" % (len(body) if length is None else length, body, tail)


async def test_a_body_longer_than_its_content_length_is_refused_every_time() -> None:
    # a length counted in characters (the HELP text's two non-ASCII characters are 5 bytes): the page was read cut
    # short, and the rest was read as the next scrape's response ('not an HTTP response'), a failure every other tick
    srv = KeptAlive(lambda path: _page(path, length=len(_page(path).split(b"\r\n\r\n", 1)[1].decode())))
    fetcher = StreamFetcher()
    async with await srv.serving():
        for _ in range(3):
            with pytest.raises(ScrapeError, match=r"more than its Content-Length of \d+ bytes \(3 more at least"):
                await fetcher.get(srv.url + "/metrics", max_bytes=1024)
        await fetcher.aclose()


async def test_bytes_sent_after_a_response_are_never_read_as_the_next_one() -> None:
    # two targets behind one address; after answering the first, the server sends a made-up answer unasked: it was
    # read as the second target's page (999 where the second serves 1)
    fake = b'up{path="/b"} 999\n'
    srv = KeptAlive(_page, after=b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(fake), fake))
    fetcher = StreamFetcher()
    async with await srv.serving():
        assert (await fetcher.get(srv.url + "/a", max_bytes=1024))[0].endswith(b'up{path="/a"} 1\n')
        (held,) = [c for conns in fetcher._idle.values() for c in conns]
        await until(lambda: len(held.reader._buffer) > 0, what="the unasked answer reached the idle connection")
        body, _ = await fetcher.get(srv.url + "/b", max_bytes=1024)
        await fetcher.aclose()
    assert body.endswith(b'up{path="/b"} 1\n')
    assert srv.connections == 2  # the connection that held it was closed, not read


async def test_a_stray_line_end_after_the_body_is_read_past() -> None:
    # some servers end a counted body with one more CRLF: the page is whole; the connection is not kept (the CRLF
    # was the next response's status line: 'not an HTTP response' every other scrape)
    srv = KeptAlive(lambda path: _page(path, tail=b"\r\n"))
    fetcher = StreamFetcher()
    async with await srv.serving():
        for _ in range(3):
            assert (await fetcher.get(srv.url + "/m", max_bytes=1024))[0].endswith(b'up{path="/m"} 1\n')
        await fetcher.aclose()
    assert srv.connections == 3
