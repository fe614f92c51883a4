"""What a bearer token must be (the API's read and admin tokens, KEDA's), and how a list of them is given."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import SecretStr
from pydantic_settings import NoDecode

# Tokens nobody should run a production control plane with: the values people paste from examples.
INSECURE_TOKENS = frozenset({"changeme", "change-me", "changethis", "secret", "token", "admin", "kvpilot", "password"})
MIN_TOKEN_LENGTH = 16
# Estimated from the token's own character frequencies (Shannon), so "aaaa…" or "abab…" of any length fail while
# `openssl rand -hex 24` (about 180 bits by this estimate) passes easily.
MIN_TOKEN_ENTROPY_BITS = 48


def token_entropy_bits(token: str) -> float:
    """Length times the per-character Shannon entropy of ``token``: a cheap lower bar, not a strength proof."""
    if not token:
        return 0.0
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return n * sum(c / n * math.log2(n / c) for c in counts.values())


TokenList = Annotated[tuple[SecretStr, ...], NoDecode]


def split_tokens(v: Any) -> Any:
    """tokens given as one comma-separated string are split"""
    if isinstance(v, str):
        return tuple(t.strip() for t in v.split(",") if t.strip())
    return v
