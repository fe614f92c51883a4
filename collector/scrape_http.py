"""The HTTP GET under each scrape, behind one small interface, one backend per class, registered in
``FETCHERS``.

- ``asyncio`` (default): HTTP/1.1 straight on asyncio streams, one kept-alive connection per target,
  gzip, chunked, size-capped while reading. A scrape is one GET of one page, and at 200 scrapes/s the
  general-purpose client's per-request machinery (connection-pool scans, anyio, h11) cost ~3x the parse
  itself (bench/scrape.py); this does only what a scrape needs.
- ``httpx``: httpx.AsyncClient, for what the lean client does not do (proxies, HTTP/2, client certificates
  through its configuration).

Both raise `ScrapeError` with an operator-readable reason; the caller bounds the whole call in time.
"""

from __future__ import annotations

import asyncio
import operator
import ssl
import zlib
from collections.abc import Callable
from typing import Protocol
from urllib.parse import quote, urlsplit

import httpx

from collector.urls import redacted

# The classic text format, what every engine serves; anything else a target insists on is still parsed. OpenMetrics
# is not listed: prometheus_client >= 0.22 (vLLM, SGLang, NIM, TensorRT-LLM's exporters) ignores q-values and answers
# any Accept naming it with OpenMetrics whose sample names are underscore-escaped ("vllm_x" samples under
# "# TYPE vllm:x"; prometheus/client_python#1177), which loses the histograms' families.
ACCEPT = "text/plain;version=0.0.4,*/*;q=0.1"
USER_AGENT = "kvpilot"
MAX_HEADER_BYTES = 64 * 1024
MAX_PREPARED_REQUESTS = 10_000  # URLs whose request is kept ready (StreamFetcher)


class ScrapeError(Exception):
    """A scrape failed for a reason worth showing an operator as is (HTTP status, size, connection)."""


class PageTooBig(ScrapeError):
    """A page over the cap, its size as far as known; the caller names what raises the cap (`ScrapeConfig`)."""


class Fetcher(Protocol):
    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        """The body (at most ``max_bytes`` once decoded) and its Content-Type; raises `ScrapeError`."""
        ...

    async def aclose(self) -> None: ...


def _too_big(max_bytes: int, declared: str | None = None, *, at_least: int = 0, inflated: bool = False) -> PageTooBig:
    """A page over the cap: its size as far as known (declared, or read or announced before the cut), since real
    pages can outgrow its default (a 22 MB vLLM page, vLLM issue 44691); the collector adds what raises the cap."""
    size = (
        f"Content-Length {declared}"
        if declared
        else f"at least {at_least} bytes" + (" once inflated" if inflated else "")
    )
    return PageTooBig(f"body exceeds {max_bytes} bytes ({size})")


# -- asyncio streams ------------------------------------------------------------------------------------------


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class _Body:
    """Collects a body up to a cap, inflating gzip on the way (the cap applies to the inflated size)."""

    __slots__ = ("chunks", "inflate", "max_bytes", "size")

    def __init__(self, max_bytes: int, encoding: str) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.chunks: list[bytes] = []
        if encoding in ("", "identity"):
            self.inflate: zlib._Decompress | None = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
        else:
            raise ScrapeError(f"unsupported Content-Encoding {encoding!r}")

    def add(self, data: bytes) -> None:
        if self.inflate is not None:
            try:
                data = self.inflate.decompress(data, self.max_bytes + 1 - self.size)
            except zlib.error as e:
                raise ScrapeError(f"bad gzip body: {e}") from None
            if self.inflate.unconsumed_tail:
                raise _too_big(self.max_bytes, at_least=self.size + len(data), inflated=True)
        self.size += len(data)
        if self.size > self.max_bytes:
            raise _too_big(self.max_bytes, at_least=self.size, inflated=self.inflate is not None)
        self.chunks.append(data)

    def result(self) -> bytes:
        if self.inflate is not None:
            rest = self.inflate.flush()  # whatever zlib still buffers, capped like the rest
            if rest:
                self.size += len(rest)
                if self.size > self.max_bytes:
                    raise _too_big(self.max_bytes, at_least=self.size, inflated=True)
                self.chunks.append(rest)
        return b"".join(self.chunks)


class StreamFetcher:
    """HTTP/1.1 GET over asyncio streams, keeping idle connections per (scheme, host, port): one per
    target in a fleet (each pod has its own address), up to ``max_idle_per_host`` where targets share an
    address (several exporters behind one node port, or a test server)."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, max_idle_per_host: int = 16) -> None:
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._ssl = ssl_context
        self.max_idle_per_host = max_idle_per_host
        # Each URL's connection key and request bytes, worked out on its first scrape rather than on every one
        # (splitting a URL and encoding the request were ~2 % of `kvpilot run`'s CPU); forgotten all at once when
        # full, as targets come and go.
        self._requests: dict[str, tuple[tuple[str, str, int], bytes]] = {}

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def _take_idle(self, key: tuple[str, str, int]) -> _Conn | None:
        conns = self._idle.get(key)
        conn = None
        while conns and conn is None:
            conn = conns.pop()
            if buffered(conn.reader):
                # bytes the target sent after its last response ended, unasked (Go's transport: "Unsolicited response
                # received on idle HTTP channel"; httpcore also drops such a connection): read as the next answer,
                # they would be the next scrape's page, of any target behind this address
                conn.close()
                conn = None
        if not conns:
            self._idle.pop(key, None)
        return conn

    def _give_back(self, key: tuple[str, str, int], conn: _Conn) -> None:
        conns = self._idle.setdefault(key, [])
        if len(conns) < self.max_idle_per_host:
            conns.append(conn)
        else:
            conn.close()

    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        prepared = self._requests.get(url)
        if prepared is None:
            if len(self._requests) >= MAX_PREPARED_REQUESTS:
                self._requests.clear()
            prepared = self._requests[url] = _prepare(url)
        key, request = prepared
        conn = self._take_idle(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, request, max_bytes)
            except _StaleConnection:
                pass  # the server closed the kept-alive connection meanwhile: one fresh try, as urllib3 does
        conn = await self._connect(key)
        try:
            return await self._exchange(key, conn, request, max_bytes)
        except _StaleConnection:
            raise ScrapeError("connection closed by the target before it answered") from None

    async def _connect(self, key: tuple[str, str, int]) -> _Conn:
        scheme, host, port = key
        context: ssl.SSLContext | None = None
        if scheme == "https":
            context = self._ssl or ssl.create_default_context()
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=MAX_HEADER_BYTES)
        except OSError as e:
            raise ScrapeError(f"connection failed: {e.strerror or e}") from None
        return _Conn(reader, writer)

    async def _exchange(
        self, key: tuple[str, str, int], conn: _Conn, request: bytes, max_bytes: int
    ) -> tuple[bytes, str | None]:
        reusable = False
        try:
            conn.writer.write(request)
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial:
                    raise _StaleConnection from None
                raise ScrapeError("connection closed in the middle of the response headers") from None
            except asyncio.LimitOverrunError:
                raise ScrapeError(f"response headers exceed {MAX_HEADER_BYTES} bytes") from None
            except ConnectionError as e:
                raise _StaleConnection from e
            status, headers, keep_alive = _parse_head(head)
            if status != 200:
                raise ScrapeError(f"HTTP {status}")
            body = _Body(max_bytes, headers.get("content-encoding", "").strip().lower())
            declared = headers.get("content-length")
            if "chunked" in headers.get("transfer-encoding", "").lower():
                await _read_chunked(conn.reader, body)
            elif declared is not None:
                if not (declared.isascii() and declared.strip().isdigit() and len(declared.strip()) <= 18):
                    raise ScrapeError(f"bad Content-Length {declared!r}")
                length = int(declared)
                if body.inflate is None:
                    if length > max_bytes:
                        raise _too_big(max_bytes, declared)
                    # A plain body of a known length within the cap (the usual page): one read of all of it, no chunks
                    # to collect and join.
                    plain = await _read_plain(conn.reader, length)
                    reusable = keep_alive if not buffered(conn.reader) else _nothing_after(conn.reader, length)
                    return plain, headers.get("content-type")
                await _read_exactly(conn.reader, length, body)
                if buffered(conn.reader):
                    keep_alive = _nothing_after(conn.reader, length)
            else:
                keep_alive = False  # the body ends when the connection does
                while data := await conn.reader.read(65536):
                    body.add(data)
            reusable = keep_alive
            return body.result(), headers.get("content-type")
        except OSError as e:
            raise ScrapeError(f"connection failed: {e.strerror or e}") from None
        finally:
            if reusable:
                self._give_back(key, conn)
            else:
                conn.close()


# What a request target keeps as it is (RFC 3986 3.3 pchar and "/", 3.4 query adds "?"; "%": an escape already made);
# every other character is sent as its UTF-8 bytes percent-encoded (RFC 3986 2.5, RFC 3987 3.1).
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


def _prepare(url: str) -> tuple[tuple[str, str, int], bytes]:
    """The connection key (scheme, host, port) of ``url`` and its GET request; raises `ScrapeError` for a URL
    that is not http(s) or whose host cannot be sent. A path or query outside ASCII (`kvpilot.io/path: /指标`), or
    with a space, is percent-encoded as UTF-8, as Prometheus sends a `__metrics_path__` and httpx a URL: before, it
    could not be written as an HTTP request at all and was reported as an 'unreadable page'."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError(f"not an http(s) URL: {redacted(url)}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:  # "http://h:x/": was also an 'unreadable page'
        raise ScrapeError(f"not an http(s) URL: {redacted(url)} ({e})") from None
    path = quote(parts.path or "/", safe=_PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_QUERY_SAFE)
    host_header = parts.netloc.rpartition("@")[2]
    if not host_header.isascii():  # an internationalised name: its IDNA form (xn--...), as the connection resolves it
        try:
            host_header = host_header.encode("idna").decode("ascii")
        except UnicodeError:
            raise ScrapeError(f"the target's host {host_header[:100]!r} is not a valid domain name") from None
    if not host_header.isprintable() or " " in host_header:
        raise ScrapeError(f"the target's host {host_header[:100]!r} cannot be sent in an HTTP Host header")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\nAccept: {ACCEPT}\r\n"
        "Accept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n"
    ).encode("latin-1")
    return (parts.scheme, parts.hostname, port), request


class _StaleConnection(Exception):
    """A kept-alive connection the server had already closed (nothing of the response was read)."""


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/") or not (code.isascii() and code.isdigit()):  # Latin-1 '²' is a str digit
        raise ScrapeError(f"not an HTTP response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return int(code), headers, keep_alive


# Bytes received on a connection and not yet read: asyncio's reader keeps what arrives in its buffer. Shared with
# kvpilot's PromQL client (collector.promql.plain_http), which keeps connections the same way.
buffered = operator.attrgetter("_buffer")


def _nothing_after(reader: asyncio.StreamReader, length: int) -> bool:
    """For a connection holding bytes after a body of ``length`` (``buffered``): False for a stray line end (some
    servers add one), left with the connection, which is not kept. A body longer than its Content-Length (one
    counted in characters, not bytes) is refused: the page read is cut short, and the rest was read as the next
    response on this connection, a failed scrape every other tick."""
    extra = bytes(buffered(reader))
    if not extra.strip(b"\r\n"):
        return False
    raise ScrapeError(
        f"the target sent more than its Content-Length of {length} bytes ({len(extra)} more at least; a length "
        "counted in characters, not bytes?)"
    )


async def _read_plain(reader: asyncio.StreamReader, length: int) -> bytes:
    """``length`` bytes as they come (``_read_exactly`` into a body that neither inflates nor caps)."""
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        raise ScrapeError(f"connection closed {length - len(e.partial)} bytes before the end of the body") from None


async def _read_exactly(reader: asyncio.StreamReader, length: int, body: _Body) -> None:
    remaining = length
    while remaining:
        data = await reader.read(min(remaining, 65536))
        if not data:
            raise ScrapeError(f"connection closed {remaining} bytes before the end of the body")
        remaining -= len(data)
        body.add(data)


async def _read_chunked(reader: asyncio.StreamReader, body: _Body) -> None:
    while True:
        size_line = await reader.readline()
        if not size_line.endswith(b"\n"):
            raise ScrapeError("connection closed in the middle of a chunked body")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ScrapeError(f"bad chunk size line {size_line[:40]!r}") from None
        if size < 0:  # int() takes a sign; _read_exactly would read a negative length as "until the peer closes"
            raise ScrapeError(f"bad chunk size line {size_line[:40]!r}")
        if size == 0:
            while (await reader.readline()).strip():  # trailers
                pass
            return
        if body.inflate is None and body.size + size > body.max_bytes:
            raise _too_big(body.max_bytes, at_least=body.size + size)
        await _read_exactly(reader, size, body)
        await reader.readexactly(2)  # CRLF after the chunk


# -- httpx ----------------------------------------------------------------------------------------------------


class HttpxFetcher:
    """The same contract on httpx.AsyncClient (streaming, so the cap applies while reading)."""

    def __init__(self, *, max_connections: int = 64, client: httpx.AsyncClient | None = None) -> None:
        self._own = client is None
        self._client = client or httpx.AsyncClient(
            trust_env=False,  # targets are pods on the cluster network: no proxies from the environment
            follow_redirects=False,
            timeout=None,  # the caller bounds the whole scrape
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers={"User-Agent": USER_AGENT, "Accept": ACCEPT},
        )

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        try:
            async with self._client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise ScrapeError(f"HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                encoded = response.headers.get("content-encoding", "identity") != "identity"
                if declared is not None and declared.isdigit() and int(declared) > max_bytes and not encoded:
                    raise _too_big(max_bytes, declared)
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise _too_big(max_bytes, at_least=size, inflated=encoded)
                    chunks.append(chunk)
                return b"".join(chunks), response.headers.get("content-type")
        except httpx.ConnectError as e:
            raise ScrapeError(f"connection failed: {e or type(e).__name__}") from None
        except httpx.InvalidURL as e:  # "http://h:x/": was an 'adapter error' with a traceback each tick
            raise ScrapeError(f"not an http(s) URL: {redacted(url)} ({e})") from None
        except httpx.HTTPError as e:
            raise ScrapeError(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None


FETCHERS: dict[str, Callable[..., Fetcher]] = {
    "asyncio": lambda max_connections=64: StreamFetcher(max_idle_per_host=max_connections),
    "httpx": lambda max_connections=64: HttpxFetcher(max_connections=max_connections),
}
