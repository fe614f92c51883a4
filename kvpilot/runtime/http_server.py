"""The HTTP API's connections, bounded: a request head that has not all arrived `api.header_timeout_s` after it
began gets a 408 and the connection is closed, and past `api.max_connections` open connections a new one is answered
503 at once.

uvicorn (0.55) does neither: a connection that never finished its request line and headers (slowloris, or a client
that connects and sends nothing) held its file descriptor for ever, and nothing bounded how many were open, so enough
of them would exhaust the process's descriptors and stop /healthz, /metrics, the scrapes and the store alike. These
are uvicorn's own protocol classes (h11's, and httptools' where that is installed, as uvicorn's ``auto`` picks) with
a deadline and a bound added, as nginx's `client_header_timeout` and Go's `ReadHeaderTimeout` do. Both are counted
on kvpilot's own /metrics (``ConnectionMetrics``), with the connections open now: a refused Prometheus or KEDA
connection is otherwise seen only as a scrape that is missing."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import h11
import uvicorn
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from uvicorn.protocols.http.h11_impl import H11Protocol

from api import series as S  # noqa: N812 (the series catalogue, as api.exposition names it)

log = logging.getLogger("kvpilot.http")

HttpImpl = Literal["auto", "h11", "httptools"]

# A refused connection is half-closed after its 503, so that the client reads the answer rather than a reset; it is
# closed outright this long after, whatever the client does.
REFUSED_LINGER_S = 1.0
# Refusals are logged at most this often: a crowd at the bound is one line a minute, not one per connection.
REFUSAL_LOG_EVERY_S = 60.0
# A connection whose client takes none of its answer for this long (once the answer outgrew the socket's buffers) is
# closed: nginx's send_timeout.
SEND_TIMEOUT_S = 60.0
# A request head (request line and headers), or a chunked body's trailers, longer than this gets a 431 and its
# connection is closed (httptools; h11 refuses one past 16 KiB itself, uvicorn's h11_max_incomplete_event_size).
# nginx's is 4 x 8 KiB, Go's 1 MiB; kvpilot's own clients send well under 4 KiB.
MAX_HEAD_BYTES = 64 << 10


@dataclass(slots=True)
class ConnectionCounts:
    """One server's connections: open now (what the bound counts), refused at the bound, closed at the deadline. Only
    its event loop writes them; /metrics reads them from its page thread (whole ints: no lock needed)."""

    open: int = 0
    refused_total: int = 0
    head_timeouts_total: int = 0
    send_timeouts_total: int = 0


class ConnectionMetrics(Collector):
    """``kvpilot_api_connections_open``, ``kvpilot_api_connections_refused_total`` and
    ``kvpilot_api_request_head_timeouts_total``, read from the counts at the scrape (the counters from 0, so that an
    increase() sees the first)."""

    def __init__(self, counts: ConnectionCounts) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        c = self._counts
        yield GaugeMetricFamily(S.API_CONNECTIONS_OPEN.name, S.API_CONNECTIONS_OPEN.help, value=c.open)
        for s, n in (
            (S.API_CONNECTIONS_REFUSED, c.refused_total),
            (S.API_REQUEST_HEAD_TIMEOUTS, c.head_timeouts_total),
            (S.API_SEND_TIMEOUTS, c.send_timeouts_total),
        ):
            yield CounterMetricFamily(s.name.removesuffix("_total"), s.help, value=n)


# uvicorn's warnings about a client's own fault, one line for each connection or request that makes them: any client
# can send those at will (a garbage request line, an Upgrade header), and each was a WARNING line in kvpilot's log.
CLIENT_FAULTS = ("Invalid HTTP request received.", "Unsupported upgrade request.", "No supported WebSocket library")


class ClientFaultLines(logging.Filter):
    """On uvicorn's logger: each of ``CLIENT_FAULTS`` said at most once every ``every_s``, the next one saying how
    many were left out meanwhile (as the 503s at the connection bound are). Before, 1,000 malformed requests were
    1,000 WARNING lines."""

    def __init__(self, every_s: float = REFUSAL_LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._said: dict[str, tuple[float, int]] = {}  # fault -> (last said at, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        fault = next((f for f in CLIENT_FAULTS if message.startswith(f)), None)
        if fault is None:
            return True
        with self._lock:
            now = self._clock()
            said = self._said.get(fault)
            if said is not None and now - said[0] < self._every_s:
                self._said[fault] = (said[0], said[1] + 1)
                return False
            self._said[fault] = (now, 0)
        if said is not None and said[1]:
            record.msg, record.args = f"{message} ({said[1]} more left out of the log in {now - said[0]:.0f} s)", ()
        return True


CLIENT_FAULT_LINES = ClientFaultLines()


class ApiServerConfig(uvicorn.Config):
    """uvicorn's configuration of kvpilot's API: no access log or lifespan, and the bounded protocol. ``registry``:
    the one /metrics renders, where its connection counts are exported (``ConnectionMetrics``)."""

    def __init__(
        self, app: Any, *, host: str, port: int, header_timeout_s: float, max_connections: int,
        http: HttpImpl = "auto", registry: CollectorRegistry | None = None, send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:  # fmt: skip
        super().__init__(
            app, host=host, port=port, http=protocol_class(http), log_config=None, access_log=False, lifespan="off"
        )
        self.header_timeout_s = header_timeout_s
        self.send_timeout_s = send_timeout_s
        self.max_connections = max_connections
        self.connections = ConnectionCounts()
        if registry is not None:
            registry.register(ConnectionMetrics(self.connections))
        logging.getLogger("uvicorn.error").addFilter(CLIENT_FAULT_LINES)  # once: a filter is added only once


def protocol_class(http: HttpImpl = "auto") -> type[asyncio.Protocol]:
    """The bounded protocol: httptools' where it is installed (``auto``, as uvicorn chooses), else h11's."""
    if http == "httptools" or (http == "auto" and importlib.util.find_spec("httptools") is not None):
        return _httptools_bounded()
    return H11Bounded


class _Refusals:
    def __init__(self) -> None:
        self.unlogged = 0
        self.logged_at: float | None = None

    def note(self, bound: int, now: float) -> None:
        self.unlogged += 1
        if self.logged_at is None or now - self.logged_at >= REFUSAL_LOG_EVERY_S:
            log.warning(
                "%d HTTP connection(s) refused with 503: %d already open (api.max_connections)", self.unlogged, bound
            )
            self.unlogged, self.logged_at = 0, now


_refusals = _Refusals()


def _plain(status: bytes, text: str, *extra: bytes) -> bytes:
    body = text.encode()
    head = [b"HTTP/1.1 " + status, b"content-type: text/plain; charset=utf-8", b"connection: close", *extra]
    head.append(b"content-length: " + str(len(body)).encode())
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class _Bounds(asyncio.Protocol):
    """What both protocols add. The deadline runs from the connection's opening, and from the first byte of each
    later request, to the end of that request's headers; a keep-alive connection idle between requests is closed by
    uvicorn's own `timeout_keep_alive` (5 s), and a body that trickles is the app's (api/deadline.py answers 408)."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]
    config: uvicorn.Config
    cycle: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # uvicorn's protocol, next in the subclass's order
        self._init_bounds()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._refuse_if_full(transport):
            return
        super().connection_made(transport)
        if self._counts is not None:
            self._counts.open += 1
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._disarm_send_timer()
        if not self._refused:
            if self._counts is not None:
                self._counts.open -= 1
            super().connection_lost(exc)

    def _init_bounds(self) -> None:
        bounded = self.config if isinstance(self.config, ApiServerConfig) else None  # uvicorn's own: as uvicorn
        self._header_timeout_s = bounded.header_timeout_s if bounded else None
        self._max_connections = bounded.max_connections if bounded else None
        self._counts = bounded.connections if bounded else None
        self._head_timer: asyncio.TimerHandle | None = None
        self._send_timeout_s = bounded.send_timeout_s if bounded else None
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_left = 0  # bytes of the answer still buffered when the send timer was armed
        self._refused = False

    def _refuse_if_full(self, transport: asyncio.Transport) -> bool:
        """Past the bound: a 503 before anything is read, half-closed, closed for good shortly after."""
        if self._max_connections is None or len(self.connections) < self._max_connections:
            return False
        self._refused = True
        if self._counts is not None:
            self._counts.refused_total += 1
        _refusals.note(self._max_connections, self.loop.time())
        transport.write(_plain(b"503 Service Unavailable", "too many open connections\n", b"retry-after: 1"))
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(REFUSED_LINGER_S, transport.close)
        else:
            transport.close()
        return True

    def _arm_head_timer(self) -> None:
        if self._head_timer is None and self._header_timeout_s is not None:
            self._head_timer = self.loop.call_later(self._header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head (httptools parses it while the answer before it is being made): that answer is not
            # cut off for it, the head gets another deadline (the answer itself is bounded by api.request_timeout_s)
            self._arm_head_timer()
            return
        log.debug("closed an HTTP connection: its request head took over %g s", self._header_timeout_s)
        if self._counts is not None:
            self._counts.head_timeouts_total += 1
        why = f"the request head did not arrive within {self._header_timeout_s:g} s\n"
        self.transport.write(_plain(b"408 Request Timeout", why))
        self.transport.close()

    def pause_writing(self) -> None:
        """The answer no longer fits the socket's buffers: the client must take some of it within the send timeout.
        uvicorn waits for it with no deadline: a client that asked for a large answer (/metrics of a large fleet) and
        never read it held its connection, a slot of api.max_connections and the answer's unsent bytes for good,
        through the keep-alive timeout too (closing waits for the buffer)."""
        super().pause_writing()
        self._arm_send_timer()

    def resume_writing(self) -> None:
        self._disarm_send_timer()
        super().resume_writing()

    def _arm_send_timer(self) -> None:
        if self._send_timer is None and self._send_timeout_s is not None:
            self._send_left = self.transport.get_write_buffer_size()
            self._send_timer = self.loop.call_later(self._send_timeout_s, self._send_timed_out)

    def _disarm_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        if self.transport.get_write_buffer_size() < self._send_left:  # it took some: another period (nginx's rule)
            self._arm_send_timer()
            return
        log.debug("closed an HTTP connection: its client took none of its answer for %g s", self._send_timeout_s)
        if self._counts is not None:
            self._counts.send_timeouts_total += 1
        self.transport.abort()

    def _bound_the_unread_body(self) -> None:
        """An answer went before its request's body was all in (a 404 or a 401 reads none): uvicorn then waits for
        the rest with no deadline, and once it is in keeps the connection with no keep-alive timeout, so a body that
        trickles, or a client idle after it, held the connection for ever. The head's deadline bounds both."""
        if not self.transport.is_closing():
            self._arm_head_timer()


class H11Bounded(_Bounds, H11Protocol):
    """uvicorn's h11 protocol (what uvicorn runs where httptools is not installed; kvpilot installs it) with the
    deadline and bound."""

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            if self.conn.trailing_data[0]:  # part of a head, buffered
                self._arm_head_timer()
        # the head is in: the body and the answer are the app's (unless the answer went first: see on_response_complete)
        elif self.cycle is None or not self.cycle.response_complete:
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY:
            self._bound_the_unread_body()


@functools.cache
def _httptools_bounded() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HttpToolsBounded(_Bounds, HttpToolsProtocol):
        """uvicorn's httptools protocol with the deadline and bounds: its parser says where a head begins and ends.

        A head is bounded in bytes too (``MAX_HEAD_BYTES``), and so are a chunked body's trailers: httptools takes a
        header of any length, kept whole in memory until its end, so one client sending headers that never end held
        ~1 GB of kvpilot's memory within the head's deadline (990 MB sent in 6 s on loopback: the process at 1,071 MB
        from 111), and trailers the same within the body's (1,124 MB in 3 s), and a few such connections would have
        the kernel kill it. h11 refuses such a head or trailer section itself (16 KiB). What is counted: the bytes
        read while a request is in progress and its parser hands nothing on (no head ended, no body bytes, no end),
        which is what it keeps."""

        _stalled_bytes = 0  # read since the parser last handed something on, within a request
        _in_message = False
        _in_head = False
        _progress = False  # the read being parsed began a request, ended its head, held body bytes or ended it
        _discarding = False  # answered 431: nothing more is parsed

        def data_received(self, data: bytes) -> None:
            if self._refused or self._discarding:
                return
            self._progress = False
            super().data_received(data)
            if self._in_message and not self.transport.is_closing():
                self._stalled_bytes = 0 if self._progress else self._stalled_bytes + len(data)
                if self._stalled_bytes > MAX_HEAD_BYTES:
                    self._head_too_large()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_message = self._in_head = self._progress = True
            self._arm_head_timer()

        def on_headers_complete(self) -> None:
            self._in_head, self._progress = False, True
            self._disarm_head_timer()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._progress = True
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._in_message, self._progress = False, True
            super().on_message_complete()

        def _head_too_large(self) -> None:
            """A 431, half-closed so that a client reading its answer gets it rather than a reset, closed for good
            shortly after. Trailers (the request's answer is the app's, begun or not), or a head pipelined behind an
            answer still being made, close the connection without one."""
            self._discarding = True
            self._disarm_head_timer()
            log.debug("closed an HTTP connection: its request head or trailers passed %d bytes", MAX_HEAD_BYTES)
            if not self._in_head or (self.cycle is not None and not self.cycle.response_complete):
                self.transport.close()
                return
            why = f"the request head (request line and headers) exceeds {MAX_HEAD_BYTES} bytes\n"
            self.transport.write(_plain(b"431 Request Header Fields Too Large", why))
            if self.transport.can_write_eof():
                self.transport.pause_reading()  # what the client still sends is left unread, not parsed or kept
                self.transport.write_eof()
                self.loop.call_later(REFUSED_LINGER_S, self.transport.close)
            else:
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.cycle.more_body:  # its parser stops marking the body once the answer is complete
                self._bound_the_unread_body()

    return HttpToolsBounded
