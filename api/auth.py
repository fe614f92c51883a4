"""Bearer tokens with two scopes: read, and admin (every change). Tokens are compared in constant time and never
logged; a principal is named by scope and position ("admin#0"), which is what audit records carry.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    admin: bool


ANONYMOUS_ADMIN = Principal("anonymous", admin=True)  # development with no tokens configured
ANONYMOUS_READER = Principal("anonymous", admin=False)


class AuthError(Exception):
    """401 (who are you?) or 403 (you may not): ``status`` says which."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _digest(token: str) -> bytes:
    # Comparing fixed-length digests keeps the comparison constant-time even when lengths differ.
    return hashlib.sha256(token.encode()).digest()


class TokenAuth:
    def __init__(self, read_tokens: Sequence[str], admin_tokens: Sequence[str], *, anonymous_read: bool) -> None:
        self._tokens = [(_digest(t), Principal(f"admin#{i}", True)) for i, t in enumerate(admin_tokens)]
        self._tokens += [(_digest(t), Principal(f"read#{i}", False)) for i, t in enumerate(read_tokens)]
        self.enabled = bool(self._tokens)
        self.anonymous_read = anonymous_read
        self.refusals: dict[int, int] = {401: 0, 403: 0}  # kvpilot_api_auth_refusals_total{status}

    def count_refusal(self, status: int) -> None:
        self.refusals[status] = self.refusals.get(status, 0) + 1

    def _match(self, token: str) -> Principal | None:
        presented = _digest(token)
        found: Principal | None = None
        for digest, principal in self._tokens:  # no early exit: every token is compared
            if hmac.compare_digest(presented, digest) and found is None:
                found = principal
        return found

    def authenticate(self, authorization: str | Sequence[str] | None, *, need_admin: bool) -> Principal:
        """``authorization``: the request's Authorization header, or every one it sent. More than one is refused:
        before, the first was taken, so a request carrying a read token and an admin token acted as whichever came
        first, while a proxy or a log in front may read the last."""
        if not self.enabled:
            return ANONYMOUS_ADMIN
        if not isinstance(authorization, str) and authorization is not None:
            if len(authorization) > 1:
                raise AuthError(
                    401, f"Authorization given {len(authorization)} times: send one 'Authorization: Bearer <token>'"
                )
            authorization = authorization[0] if authorization else None
        if authorization is None or not authorization.strip():
            if self.anonymous_read and not need_admin:
                return ANONYMOUS_READER
            raise AuthError(401, "missing bearer token: send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(401, "malformed Authorization header: expected 'Bearer <token>'")
        principal = self._match(token.strip())
        if principal is None:
            raise AuthError(401, "invalid bearer token")
        if need_admin and not principal.admin:
            raise AuthError(403, "this token has the read scope; this request needs an admin token")
        return principal
