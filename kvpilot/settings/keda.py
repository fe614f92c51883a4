"""`keda`: the KEDA external scaler — when a decision is stale, and how its gRPC server is secured."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvpilot.settings._section import HomePath, _Section
from kvpilot.settings.tokens import MIN_TOKEN_LENGTH, TokenList, split_tokens


class KedaSettings(_Section):
    """The KEDA external scaler (gRPC) and the metrics-api route: when a decision counts as stale, and how the gRPC
    server is secured. TLS: a certificate and key; with a client CA as well, KEDA must present a certificate it
    signed (mTLS, KEDA's `tlsClientCert`/`tlsClientKey`). Bearer tokens: every ExternalScaler call must carry one,
    as the `bearerTokenFromEnv` trigger metadata KEDA resolves from the scale target's environment, or as a gRPC
    `authorization: Bearer …` header (grpcurl, other clients). The health service stays open (kubelet probes)."""

    stale_after_ticks: float = Field(
        default=6.0, ge=2, description="A decision older than this many loop intervals is refused."
    )
    tls_cert_file: HomePath | None = Field(
        default=None,
        description="PEM certificate of the gRPC server (set: TLS); it names the `scalerAddress` host.",
    )
    tls_key_file: HomePath | None = Field(default=None, description="PEM private key of that certificate.")
    tls_client_ca_file: HomePath | None = Field(
        default=None, description="Set: mutual TLS, client certificates signed by this CA are required."
    )
    bearer_tokens: TokenList = Field(
        default=(),
        description="Set: every ExternalScaler call must carry one of these; comma-separated in the environment.",
    )

    serve_from: Literal["loop", "process"] = Field(
        default="loop",
        description=(
            "`process`: the gRPC server runs in a small process of its own that mirrors the loop's decisions, so "
            "a tick in progress cannot delay KEDA's answers (restarted if it dies; `/readyz` and "
            "`kvpilot_keda_server_up` say when it is not serving). Only on the wall clock and without sharding; "
            "elsewhere the server stays in the loop's process."
        ),
    )

    _split_bearer = field_validator("bearer_tokens", mode="before")(split_tokens)

    @model_validator(mode="after")
    def _tls_complete(self) -> KedaSettings:
        """`tls_cert_file` and `tls_key_file` come together, and `tls_client_ca_file` (mTLS) needs them."""
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("keda.tls_cert_file and keda.tls_key_file must be set together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("keda.tls_client_ca_file (mutual TLS) needs keda.tls_cert_file and keda.tls_key_file")
        for i, token in enumerate(self.bearer_tokens):
            if len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"keda.bearer_tokens[{i}]: shorter than {MIN_TOKEN_LENGTH} characters; "
                    "generate one with `openssl rand -hex 24`"
                )
        return self
