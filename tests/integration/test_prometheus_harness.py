import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"# TYPE harness_value gauge\nharness_value 42\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_real_prometheus_scrapes_a_loopback_target(tmp_path):
    # Proves the harness: a real Prometheus on loopback scrapes a page and its query API returns the value.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = f"127.0.0.1:{server.server_address[1]}"
        cfg = [{"job_name": "harness", "static_configs": [{"targets": [target]}]}]
        with run_prometheus(tmp_path, scrape_configs=cfg) as prom:
            result = prom.wait_for("harness_value", timeout_s=30)
            assert float(result[0]["value"][1]) == 42.0
            assert result[0]["metric"]["instance"] == target
    finally:
        server.shutdown()
