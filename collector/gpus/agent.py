"""`kvpilot gpu-agent`: NVML readings served as a dcgm-exporter page, for nodes that run no dcgm-exporter.

Run one per GPU node (a DaemonSet with the NVIDIA runtime, docs/gpu-agent.md). Every ``GET /metrics`` reads
every GPU through NVML afresh (`NvmlCollector`: a few NVML calls per GPU, well under a millisecond each) and
answers the page `nvml_page.render_nvml_page` writes, which kvpilot's dcgm adapter reads like dcgm-exporter's.
``GET /healthz`` answers 200 while NVML answers, 503 with the reason when it does not. Needs only the standard
library and nvidia-ml-py, so it also runs as ``python3 -m collector.gpus.agent`` where kvpilot is not installed.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType

from collector.gpus.nvml import NvmlCollector, NvmlUnavailable
from collector.gpus.nvml_page import TEXT_CONTENT_TYPE, render_nvml_page

DEFAULT_PORT = 9400  # dcgm-exporter's: discovery and scrape configs written for it find the agent unchanged


class GpuAgent:
    """One node's NVML, read on demand; one read at a time (NVML's event queue is drained by each read)."""

    def __init__(self, node: str, *, nvml: ModuleType | None = None, clock: Callable[[], float] = time.time) -> None:
        self.collector = NvmlCollector(node, nvml=nvml)
        self._clock = clock
        self._lock = threading.Lock()

    def page(self) -> tuple[int, bytes]:
        """(status, body): 200 and the page, or 503 and why NVML did not answer."""
        with self._lock:
            try:
                samples = self.collector.collect(self._clock())
            except NvmlUnavailable as err:
                return 503, f"{err}\n".encode()
        return 200, render_nvml_page(samples)

    def health(self) -> tuple[int, bytes]:
        with self._lock:
            try:
                self.collector.start()
            except NvmlUnavailable as err:
                return 503, f"{err}\n".encode()
        return 200, b"ok\n"

    def close(self) -> None:
        with self._lock:
            self.collector.close()


def make_server(agent: GpuAgent, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kvpilot-gpu-agent"
        default_request_version = "HTTP/1.0"  # a request line too broken to name a version still gets a status line
        error_content_type = "text/plain; charset=utf-8"
        error_message_format = "%(code)d %(message)s\n"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, body = agent.page()
                self._answer(status, body, TEXT_CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
            elif path == "/healthz":
                self._answer(*agent.health(), "text/plain; charset=utf-8")
            else:
                self._answer(404, b"not found: GET /metrics or /healthz\n", "text/plain; charset=utf-8")

        def _refuse(self) -> None:
            self._answer(405, b"method not allowed: GET only\n", "text/plain; charset=utf-8", allow="GET")

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        def _answer(self, status: int, body: bytes, content_type: str, allow: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if allow is not None:
                self.send_header("Allow", allow)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape is noise; errors reach the client as statuses

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def default_node() -> str:
    """The node name Kubernetes gives the pod (``NODE_NAME`` from the downward API), else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def run(host: str, port: int, node: str, *, once: bool = False, nvml: ModuleType | None = None) -> int:
    agent = GpuAgent(node, nvml=nvml)
    if once:  # print one page and stop: checks a node by hand
        status, body = agent.page()
        (sys.stdout if status == 200 else sys.stderr).write(body.decode())
        agent.close()
        return 0 if status == 200 else 1
    try:
        server = make_server(agent, host, port)
    except OSError as e:  # the port taken (dcgm-exporter's 9400), an address not this host's: was a traceback
        agent.close()
        print(f"kvpilot gpu-agent: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"kvpilot gpu-agent: node {node}, serving http://{host}:{server.server_port}/metrics", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        agent.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvpilot gpu-agent", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--node", default=None, help="node name on the page (default: $NODE_NAME or the host name)")
    parser.add_argument("--once", action="store_true", help="print one page to stdout and exit")
    args = parser.parse_args(argv)
    return run(args.host, args.port, args.node or default_node(), once=args.once)


if __name__ == "__main__":
    raise SystemExit(main())
