"""The PromQL source's own HTTP/1.1 client for plain-HTTP Prometheus: keep-alive connections over asyncio streams.

A PromQL read is one small request and one answer; through httpx (httpcore, anyio, h11) each cost the event loop
~0.65 ms of CPU on an idle machine and ~1.6 ms on a busy one, ten times the request itself (/tmp/s3/A/mb.py), and a
shard's instance sends four a tick. This client does only what those reads need: GET or POST, ``Accept-Encoding:
gzip``, an answer framed by ``Content-Length``, chunked, or the connection's end, inflated and refused past a size
cap. TLS and everything else stay with httpx (``collector.discovery.promql`` chooses). The scrape's own client
(``collector.scrape_http.StreamFetcher``) is the same idea for GETs of pages; it sends no form and keeps no error
body, and Prometheus' ``bad_data`` message is what an operator needs to see, so the two are apart for now.
"""

from __future__ import annotations

import asyncio
import base64
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from collector.scrape_http import buffered
from collector.urls import password_masked

_READ_BYTES = 64 * 1024
_MAX_IDLE_PER_ORIGIN = 8
_HEX_DIGITS = b"0123456789abcdefABCDEF"
ERROR_BODY_BYTES = 64 * 1024  # of a non-200 answer, enough to quote its start
# An answer is inflated at most this many bytes at a time, the event loop answering between pieces. Read buffered,
# a whole answer inflated in one step of the loop: 2.6 and 3.9 ms of the loop's CPU for the 1.7 and 3.9 MB answers
# of a tick at 10,000 replicas, during which the API and KEDA's gRPC calls waited (issue 17, helper K's probe);
# inflating runs at about 1 MB/ms there, so a piece is ~0.25 ms.
INFLATE_STEP = 256 * 1024


class HttpError(Exception):
    """A request that got no usable answer; ``str`` says why (the caller names the URL)."""


class TooLarge(HttpError):
    """The answer passed the caller's size cap."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes  # inflated
    date: str | None = None  # the answer's Date header: the server's clock (``PromQLSource.server_clock_offset_s``)


@dataclass(frozen=True, slots=True)
class _Target:
    origin: tuple[str, int]  # (host, port): the connections to reuse
    head: bytes  # request line and headers up to (not including) Content-* and the blank line


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class PlainHttpClient:
    """Keep-alive HTTP/1.1 over asyncio streams, ``http://`` only. Requests may run concurrently (each takes an idle
    connection or opens one). A request sent on a reused connection that the server had closed meanwhile (no byte of
    an answer read) is sent once more on a new one: PromQL reads change nothing, so repeating one is safe."""

    def __init__(self, *, user_agent: str = "kvpilot") -> None:
        self._user_agent = user_agent
        self._idle: dict[tuple[str, int], list[Streams]] = {}
        self._targets: dict[tuple[str, str], _Target] = {}

    @staticmethod
    def serves(url: str) -> bool:
        return url[:7].lower() == "http://"

    async def request(
        self, method: str, url: str, *, body: bytes | None = None, content_type: str = "", max_bytes: int
    ) -> Answer:
        """The answer, its body inflated; ``TooLarge`` past ``max_bytes`` inflated bytes (a non-200 answer's body is
        cut at 64 KiB instead), ``HttpError`` for an answer that is not HTTP, a connection lost or refused."""
        target = self._target(method, url)
        request = target.head
        if body is not None:
            request += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
        request += b"\r\n" + (body or b"")
        streams, reused = await self._connection(target.origin)
        try:
            try:
                status, keep, body_reader = await _exchange(streams, request)
            except _Unanswered:
                _close(streams)
                if not reused:
                    raise
                streams = await _open(target.origin)  # the server closed it while idle: once more, fresh
                status, keep, body_reader = await _exchange(streams, request)
            if status == 200:
                answer = await body_reader.read(max_bytes)
            else:
                answer, keep = await body_reader.read(ERROR_BODY_BYTES, cut=True), False
        except BaseException:  # cancelled (timeout, abort) or failed mid-answer: the connection's state is unknown
            _close(streams)
            raise
        if keep:
            self._release(target.origin, streams)
        else:
            _close(streams)
        return Answer(status, answer, body_reader.date)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for streams in idle:
                _close(streams)
        self._idle.clear()

    def _target(self, method: str, url: str) -> _Target:
        key = (method, url)
        target = self._targets.get(key)
        if target is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise HttpError(f"not a plain-HTTP URL: {password_masked(url)!r}")
            port = parts.port or 80
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            lines = [
                f"{method} {path} HTTP/1.1",
                f"Host: {host}" + (f":{port}" if parts.port is not None and port != 80 else ""),
                "Accept: */*",
                "Accept-Encoding: gzip",
                f"User-Agent: {self._user_agent}",
            ]
            if parts.username is not None:  # credentials in the URL, as httpx sends them
                secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                lines.append(f"Authorization: Basic {base64.b64encode(secret.encode()).decode('ascii')}")
            target = _Target((parts.hostname, port), ("\r\n".join(lines) + "\r\n").encode("latin-1"))
            if len(self._targets) >= 64:  # the URL changed many times over: start over
                self._targets.clear()
            self._targets[key] = target
        return target

    async def _connection(self, origin: tuple[str, int]) -> tuple[Streams, bool]:
        idle = self._idle.get(origin)
        while idle:
            streams = idle.pop()
            if streams[0].at_eof() or streams[1].is_closing() or buffered(streams[0]):
                # the server closed it while idle, or sent bytes unasked (a proxy's, a second answer, the rest of an
                # answer longer than its Content-Length): read, they would be taken for the next answer (Go's
                # transport and httpcore also drop such a connection)
                _close(streams)
                continue
            return streams, True
        return await _open(origin), False

    def _release(self, origin: tuple[str, int], streams: Streams) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) < _MAX_IDLE_PER_ORIGIN:
            idle.append(streams)
        else:
            _close(streams)


class _Unanswered(HttpError):
    """The connection ended before the first byte of an answer."""

    def __init__(self) -> None:
        super().__init__("connection closed before an answer")


async def _open(origin: tuple[str, int]) -> Streams:
    try:
        return await asyncio.open_connection(*origin, limit=_READ_BYTES)
    except OSError as e:
        raise HttpError(f"cannot connect to {origin[0]}:{origin[1]}: {e}") from None


def _close(streams: Streams) -> None:
    streams[1].close()


async def _exchange(streams: Streams, request: bytes) -> tuple[int, bool, _Body]:
    """Send ``request``, read the answer's head: (status, whether the connection may be reused once the body is read,
    the body's reader)."""
    reader, writer = streams
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise _Unanswered from None
        raise HttpError("connection closed in the answer's head") from None
    except (ConnectionResetError, BrokenPipeError):
        raise _Unanswered from None
    except asyncio.LimitOverrunError:
        raise HttpError("answer head longer than 64 KiB") from None
    except OSError as e:
        raise HttpError(f"connection failed: {e}") from None
    status, headers = _parse_head(head)
    while 100 <= status < 200:  # interim answers (no Expect is sent, but a server may send 103)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as e:
            raise HttpError(f"connection failed in the answer's head: {type(e).__name__}") from None
        status, headers = _parse_head(head)
    connection = headers.get("connection", "").lower()
    # HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes it unless told to keep it
    keep = "close" not in connection and (not head.startswith(b"HTTP/1.0") or "keep-alive" in connection)
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        raise HttpError(f"answer in an encoding not asked for: {encoding[:80]!r}")
    framing = headers.get("transfer-encoding", "").lower()
    chunks: AsyncIterator[bytes]
    if status in (204, 304):
        chunks = _nothing()
    elif framing:
        if framing.rsplit(",", 1)[-1].strip() != "chunked":
            raise HttpError(f"answer framed as {framing[:80]!r}")
        chunks = _chunked(reader)
    elif "content-length" in headers:
        declared = headers["content-length"]
        if not _digits(declared):
            raise HttpError(f"bad Content-Length {declared[:80]!r}")
        chunks = _sized(reader, int(declared))
    else:  # framed by the connection's end
        keep = False
        chunks = _to_end(reader)
    return status, keep, _Body(chunks, gzip=encoding == "gzip", date=headers.get("date"))


class _Body:
    def __init__(self, chunks: AsyncIterator[bytes], *, gzip: bool, date: str | None = None) -> None:
        self.date = date
        self._chunks = chunks
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None

    async def read(self, max_bytes: int, *, cut: bool = False) -> bytes:
        """The whole body, inflated; past ``max_bytes``, ``TooLarge`` or (``cut``) its first ``max_bytes``. An
        inflated piece is never let grow past ``max_bytes`` + 1: a small answer that inflates hugely stops there."""
        out: list[bytes] = []
        size = 0
        try:
            async for raw in self._chunks:
                data = raw
                while True:
                    if self._inflate is None:
                        piece, data = data, b""
                    else:
                        piece = self._inflate.decompress(data, min(INFLATE_STEP, max_bytes - size + 1))
                        data = self._inflate.unconsumed_tail
                    size += len(piece)
                    if size > max_bytes:
                        if cut:
                            out.append(piece[: len(piece) - (size - max_bytes)])
                            return b"".join(out)
                        raise TooLarge(f"answer larger than {max_bytes} bytes")
                    out.append(piece)
                    if not data:
                        break
                    await asyncio.sleep(0)  # the event loop's turn between two inflated pieces
            if self._inflate is not None:
                rest = self._inflate.flush()
                if size + len(rest) > max_bytes and not cut:
                    raise TooLarge(f"answer larger than {max_bytes} bytes")
                out.append(rest[: max(0, max_bytes - size)])
        except zlib.error as e:
            raise HttpError(f"answer not valid gzip: {e}") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as e:
            raise HttpError(f"connection failed in the answer's body: {type(e).__name__}") from None
        return b"".join(out)


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not _digits(code):
        raise HttpError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpError(f"bad header line {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), headers


def _digits(text: str) -> bool:
    """1 to 18 ASCII digits. The head is read as Latin-1, whose '²' and '³' ``str.isdigit`` takes for digits and
    ``int`` refuses, as it refuses more than 4,300 digits: a ValueError, not the HttpError naming the server that
    the caller turns into a PromQLError."""
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


async def _sized(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    while length > 0:
        data = await reader.read(min(length, _READ_BYTES))
        if not data:
            raise asyncio.IncompleteReadError(b"", length)
        length -= len(data)
        yield data


async def _to_end(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while data := await reader.read(_READ_BYTES):
        yield data


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        line = await reader.readuntil(b"\r\n")
        digits = line.split(b";", 1)[0].strip()
        # hexadecimal digits only: int(_, 16) also takes a sign, "0x" and "_" (a size of -5 read as an empty chunk)
        if not digits or len(digits) > 16 or digits.strip(_HEX_DIGITS):
            raise HttpError(f"bad chunk size line {line[:40]!r}")
        size = int(digits, 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return
        async for data in _sized(reader, size):
            yield data
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError("chunk not followed by CRLF")
