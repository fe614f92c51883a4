"""A tiny loopback HTTP server that serves fixed /metrics pages by path, for scrape and discovery tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CONTENT_TYPE = "text/plain; version=0.0.4"


@contextmanager
def serve_pages(pages: Mapping[str, Path | bytes], *, missing_status: int = 404) -> Iterator[tuple[str, int]]:
    """Serve each path's page (a file or bytes); any other path answers `missing_status`. Yields (host, port)."""

    class _Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = pages.get(self.path)
            body = page.read_bytes() if isinstance(page, Path) else page if page is not None else b"not found"
            self.send_response(200 if page is not None else missing_status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    # shutdown() waits for serve_forever's next poll: 20 ms rather than the default 0.5 s of every test's teardown
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="test-pages", daemon=True
    ).start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
