"""`api`: the HTTP and gRPC servers, their ports and bearer tokens."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from kvpilot.settings._section import _Section
from kvpilot.settings.tokens import TokenList, presentable_tokens, split_tokens


class ApiSettings(_Section):
    """The HTTP API, its /metrics, and the KEDA gRPC port."""

    host: str | None = Field(
        default=None,
        description=(
            "Address the HTTP and gRPC servers bind. Unset: 127.0.0.1 while the API is open (no tokens, which only "
            "development allows: anyone who reaches it may act), else 0.0.0.0."
        ),
    )
    http_port: int = Field(default=8080, ge=0, le=65535, description="HTTP API and /metrics port (0: any free port).")
    grpc_port: int = Field(
        default=9090, ge=0, le=65535, description="KEDA external-scaler gRPC port (0: any free port)."
    )
    read_tokens: TokenList = Field(
        default=(), description="Bearer tokens allowed to read; comma-separated in the environment."
    )
    admin_tokens: TokenList = Field(
        default=(),
        description="Bearer tokens allowed to read and to act (approve drains); comma-separated in the environment.",
    )
    anonymous_read: bool = Field(
        default=False, description="Outside development, reads need a token unless this is set."
    )
    max_body_bytes: int = Field(default=64 * 1024, ge=256, description="Largest request body the API accepts.")
    request_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "An API request not answered in this time (one waiting on a hung store) gets a 503 with"
            " `Retry-After`, and a change that would commit after it is rolled back, so a write the client saw fail"
            " is not applied later; a request whose body has not all arrived by then gets a 408 (nothing applied,"
            " connection closed). `/healthz`, `/readyz` and `/metrics` never wait on the store and are exempt."
            " Keep it under your clients' and load balancer's own timeouts."
        ),
    )

    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "A connection whose request line and headers have not all arrived this long after it opened (or after"
            " the request's first byte, on a keep-alive connection) gets a 408 and is closed, so a client that"
            " trickles its headers (slowloris) or connects and sends nothing cannot hold a file descriptor for ever."
            " A keep-alive connection idle between requests is closed after 5 s (uvicorn's own timeout); a slow body"
            " is `request_timeout_s`'s."
        ),
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description=(
            "Open HTTP connections at most; one more is answered 503 with `Retry-After: 1` and closed at once, while"
            " those already open are served. Bounds the descriptors the API can take (one per connection, and ~5 KiB"
            " of memory), far above what kvpilot's clients open (Prometheus, probes, KEDA's metrics-api trigger,"
            " operators: tens), and far below a container's descriptor limit, which scrapes and the store share."
        ),
    )

    _split_read = field_validator("read_tokens", "admin_tokens", mode="before")(split_tokens)

    @field_validator("read_tokens", "admin_tokens")
    @classmethod
    def _presentable(cls, v: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        """every token is one a request can carry: not empty, no white space at either end"""
        return presentable_tokens(v)
