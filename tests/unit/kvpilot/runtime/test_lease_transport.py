"""Lease calls over one kept connection (``kvpilot.runtime.lease._KeptConnection``): the official ``ApiClient``'s
URL, headers and credentials, sent with ``http.client`` instead of urllib3 (a third of the CPU of a call, paid by
every sharded instance a few times a tick: issue 17). What it must keep of the client: the token (refreshed), TLS
from the configuration's CA and verification settings, one connection reused, a connection the server closed
while it was kept reopened and the call sent again, errors as ``ApiException``; and urllib3 where only it can (a
proxy, an SNI name)."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvpilot.runtime.lease import Leases, _KeptConnection

LEASE = {"metadata": {"name": "l", "namespace": "kv", "resourceVersion": "1"}, "spec": {"holderIdentity": "a"}}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, close_after_each: bool = False, status: int = 200) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.close_after_each = close_after_each  # drops the connection after answering, without saying so
        self.status = status
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        data = orjson.dumps(LEASE if self.server.status < 300 else {"kind": "Status", "code": self.server.status})
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.close_connection = self.server.close_after_each

    do_GET = do_PUT = do_POST = _answer  # noqa: N815 (BaseHTTPRequestHandler's names)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(server: _Server) -> Iterator[_Server]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    yield from _serve(_Server())


def _leases(url: str, **config: Any) -> Leases:
    return Leases(client.ApiClient(client.Configuration(host=url, **config)), timeout_s=2.0)


def _url(server: _Server, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


def test_calls_carry_the_clients_token_refreshed_and_share_one_connection(server: _Server) -> None:
    api = _leases(_url(server), api_key={"authorization": "Bearer t0"})
    tokens = iter(["t1", "t2", "t3"])
    api.api_client.configuration.refresh_api_key_hook = lambda c: c.api_key.update(
        authorization=f"Bearer {next(tokens)}"
    )
    assert api.read_namespaced_lease("l", "kv") == LEASE
    api.replace_namespaced_lease("l", "kv", LEASE)
    api.list_namespaced_lease("kv", label_selector="kvpilot.io/lease-group=kvpilot")
    assert [(m, p) for m, p, _, _ in server.requests] == [
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/kv/leases/l"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kv/leases/l"),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kv/leases?labelSelector=kvpilot.io/lease-group%3Dkvpilot",
        ),  # as the ApiClient encodes it
    ]
    assert [h["authorization"] for _, _, h, _ in server.requests] == ["Bearer t1", "Bearer t2", "Bearer t3"]
    assert orjson.loads(server.requests[1][3]) == LEASE
    assert server.requests[1][2]["content-type"] == "application/json"
    assert server.connections == 1


def test_a_kept_connection_the_server_closed_is_reopened_and_the_call_sent_again() -> None:
    for server in _serve(_Server(close_after_each=True)):
        api = _leases(_url(server))
        for _ in range(3):
            assert api.replace_namespaced_lease("l", "kv", LEASE) == LEASE
        assert len(server.requests) == 3  # each sent once: the resend is on a connection that took nothing
        assert server.connections == 3


@pytest.mark.parametrize("status", [404, 409, 500])
def test_an_error_answer_is_the_clients_api_exception(status: int) -> None:
    for server in _serve(_Server(status=status)):
        with pytest.raises(ApiException) as raised:
            _leases(_url(server)).replace_namespaced_lease("l", "kv", LEASE)
        assert raised.value.status == status
        assert '"code"' in (raised.value.body or "")


def test_what_only_urllib3_does_goes_through_the_client() -> None:
    assert _KeptConnection.for_config(client.Configuration(host="https://k:6443"), 1.0) is not None
    for config in (
        {"proxy": "http://proxy:3128"},
        {"tls_server_name": "kubernetes.default"},
        {"socket_options": []},
    ):
        assert _KeptConnection.for_config(client.Configuration(host="https://k:6443", **config), 1.0) is None
    plain = client.Configuration(host="https://k:6443")
    plain.assert_hostname = "other-name"
    assert _KeptConnection.for_config(plain, 1.0) is None


def _tls(config: dict[str, Any]) -> ssl.SSLContext:
    kept = _KeptConnection.for_config(client.Configuration(host="https://k:6443", **config), 1.0)
    assert kept is not None
    assert isinstance(kept._context, ssl.SSLContext)
    return kept._context


def test_tls_verification_follows_the_configuration() -> None:
    default = _tls({})
    assert (default.verify_mode, default.check_hostname) == (ssl.CERT_REQUIRED, True)
    unverified = _tls({"verify_ssl": False})
    assert (unverified.verify_mode, unverified.check_hostname) == (ssl.CERT_NONE, False)
    no_name = _tls({"assert_hostname": False})
    assert (no_name.verify_mode, no_name.check_hostname) == (ssl.CERT_REQUIRED, False)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    assert shutil.which("openssl"), "openssl is installed by scripts/install-system-deps.sh"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_with_the_configurations_ca_and_refused_without_it(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server = _Server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    for running in _serve(server):
        url = _url(running, "https")
        assert _leases(url, ssl_ca_cert=str(cert)).read_namespaced_lease("l", "kv") == LEASE
        assert _leases(url, verify_ssl=False).read_namespaced_lease("l", "kv") == LEASE
        with pytest.raises(ssl.SSLCertVerificationError):
            _leases(url).read_namespaced_lease("l", "kv")
