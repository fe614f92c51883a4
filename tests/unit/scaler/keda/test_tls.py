"""TLS and mutual TLS on the KEDA gRPC server, with certificates made for the test by the openssl CLI."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from scaler.keda.server import TlsFiles, build_server
from tests.unit.scaler.keda.harness import decision, keda_poll, ref, running_scaler

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
             "-keyout", key, "-out", cert)  # fmt: skip
    return cert, key


def _leaf(folder: Path, name: str, ca: tuple[Path, Path], usage: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (folder / f"{name}.{suffix}" for suffix in ("crt", "key", "csr", "ext"))
    ext.write_text(f"subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage={usage}\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", key, "-out", csr)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-days", "1",
             "-extfile", ext, "-out", cert)  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca, other_ca = _ca(folder, "kvpilot-test-ca"), _ca(folder, "other-ca")
    server = _leaf(folder, "kvpilot", ca, "serverAuth")
    client = _leaf(folder, "keda-operator", ca, "clientAuth")
    stranger = _leaf(folder, "stranger", other_ca, "clientAuth")
    return Pki(ca[0], server[0], server[1], client[0], client[1], stranger[0], stranger[1])


def _client(pki: Pki, cert: Path | None = None, key: Path | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )


async def test_tls_serves_a_client_that_trusts_the_ca(pki: Pki, serve_from: str) -> None:
    tls = TlsFiles(pki.server_cert, pki.server_key)
    async with running_scaler(tls=tls, channel_credentials=_client(pki), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=4))
        replicas, active, *_ = await keda_poll(scaler.stub, ref())
    assert (replicas, active) == (4, True)


async def test_plaintext_client_cannot_talk_to_a_tls_server(pki: Pki, serve_from: str) -> None:
    tls = TlsFiles(pki.server_cert, pki.server_key)
    async with running_scaler(tls=tls, serve_from=serve_from) as scaler:  # insecure channel
        scaler.board.publish(decision())
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await scaler.stub.IsActive(ref(), timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


CLIENT_CASES = [
    # KEDA's tlsClientCert/tlsClientKey signed by the configured client CA: served
    ("client", True),
    # no client certificate at all: refused by the handshake
    (None, False),
    # a certificate from a CA the server does not trust: refused
    ("stranger", False),
]


@pytest.mark.parametrize(("who", "served"), CLIENT_CASES)
async def test_mutual_tls_requires_a_client_certificate_from_the_ca(
    pki: Pki, who: str | None, served: bool, serve_from: str
) -> None:
    tls = TlsFiles(pki.server_cert, pki.server_key, client_ca_file=pki.ca)
    cert, key = {
        "client": (pki.client_cert, pki.client_key),
        "stranger": (pki.stranger_cert, pki.stranger_key),
        None: (None, None),
    }[who]
    async with running_scaler(tls=tls, channel_credentials=_client(pki, cert, key), serve_from=serve_from) as scaler:
        scaler.board.publish(decision(desired=2))
        try:
            outcome = grpc.StatusCode.OK if (await scaler.stub.IsActive(ref(), timeout=10)).result else None
        except grpc.aio.AioRpcError as error:
            outcome = error.code()
    # refused clients fail the handshake (UNAVAILABLE), never reach the servicer
    assert outcome == (grpc.StatusCode.OK if served else grpc.StatusCode.UNAVAILABLE)


def test_missing_certificate_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.crt"
    with pytest.raises(ValueError, match=r"TLS certificate .*nope\.crt"):
        build_server("127.0.0.1:0", [], tls=TlsFiles(missing, tmp_path / "nope.key"))
