"""Hand-written HTTP servers on loopback, for the tests of kvpilot's HTTP clients against what real servers and the
proxies in front of them do wrong: bytes sent unasked on a kept connection, a framing miscounted, a connection closed
without an answer, an error page too large to read, a server that accepts and never answers. kvpilot's clients: the
scraper's ``collector.scrape_http.StreamFetcher``, the Prometheus client ``collector.promql.plain_http.PlainHttpClient``
(and httpx where a source is handed one), the Kubernetes client's urllib3."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable


class KeptAlive:
    """An asyncio server keeping each connection: answers each request on it with ``answer(path)`` (bytes sent as
    they are: the test writes the status line, the head and the body) and, ``after`` the answer was read and the
    connection kept, sends ``after`` on it unasked (a proxy that misbehaves). Counts connections; ``url`` once
    ``serving``."""

    def __init__(self, answer: Callable[[bytes], bytes], after: bytes = b"") -> None:
        self.answer, self.after, self.connections = answer, after, 0
        self.url = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                writer.write(self.answer(request.split(b" ")[1]))
                await writer.drain()
                if self.after:
                    await asyncio.sleep(0.05)  # after the client has read the answer and kept the connection
                    writer.write(self.after)
                    await writer.drain()
        writer.close()

    async def serving(self) -> asyncio.base_events.Server:
        """The server on a free loopback port (``async with await srv.serving():``); sets ``url``."""
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return server


class Listener:
    """A listening socket on a free loopback port, each connection it accepts handed to ``serve`` in a thread of its
    own (a client on the event loop under test is not held up by the server; ``in_turn``: in the accepting thread,
    one after another). Counts connections; ``close`` stops accepting. Subclasses set what ``serve`` reads before
    calling ``__init__``: accepting starts there."""

    in_turn = False

    def __init__(self) -> None:
        self.connections = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                self.connections += 1
                if self.in_turn:
                    self.serve(conn)
                else:
                    threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._listener.close()


def read_head(conn: socket.socket, pending: bytes = b"") -> tuple[bytes, bytes] | None:
    """A request's head read from ``conn`` after ``pending`` (bytes already read), without its blank line, and what
    was read past it; None when the client closed first."""
    while b"\r\n\r\n" not in pending:
        data = conn.recv(65536)
        if not data:
            return None
        pending += data
    head, _, rest = pending.partition(b"\r\n\r\n")
    return head, rest


class Silent(Listener):
    """Accepts every connection and never reads from it nor answers (an API server or a Prometheus that hung); keeps
    them, in the order accepted, in ``held`` until ``close``."""

    in_turn = True

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        self.accepted = threading.Event()  # set at the first connection
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        self.held.append(conn)
        self.accepted.set()

    def close(self) -> None:
        super().close()
        for conn in self.held:
            conn.close()
