"""A loopback HTTP server that answers each request with what the test's function makes of it: the stand-in
Prometheus (or whatever stands at its URL) of the PromQL source's tests, one class where four test files each wrote
the same ``http.server`` boilerplate."""

from __future__ import annotations

import threading
from collections.abc import Callable
from email.message import Message
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What a request is answered with: (status, JSON body), from its path (with its query string), its body and its head.
Answer = Callable[[str, bytes, Message], tuple[int, bytes]]


class JsonServer:
    """Answers every GET and POST with ``answer(path, body, headers)``, as ``application/json`` on a kept-alive
    HTTP/1.1 connection, each request in a thread of its own; ``url`` and ``port`` on a free loopback port. ``clock``
    (seconds since the epoch) sets the answers' Date header: a server whose clock is not this host's."""

    def __init__(self, answer: Answer, clock: Callable[[], float] | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def date_time_string(self, timestamp: float | None = None) -> str:
                if clock is None:
                    return super().date_time_string(timestamp)
                return formatdate(clock(), usegmt=True)

            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, raw = answer(self.path, body, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer  # noqa: N815  (http.server's names)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
