"""What a bearer token must be (the API's read and admin tokens, KEDA's), and how a list of them is given."""

from __future__ import annotations

import json
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
    """tokens given as one string are split at its commas, or read as the JSON list of strings it is
    (`["t1", "t2"]`)"""
    if isinstance(v, str):
        # JSON is how the environment gives every other list; split at its commas, ["r1…","r2…"] was the tokens
        # `["r1…"` and `"r2…"]`, which no client sends: every request refused 401, not a word at start
        listed = _json_list(v)
        if listed is not None:
            return listed
        return tuple(t.strip() for t in v.split(",") if t.strip())
    return v


def _json_list(v: str) -> tuple[str, ...] | None:
    text = v.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if isinstance(decoded, list) and all(isinstance(t, str) for t in decoded):
        return tuple(decoded)
    raise ValueError('written in brackets but not a JSON list of strings: give ["token1", "token2"] or token1,token2')


def presentable_tokens(tokens: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
    """Every API token is one a client can send: not empty, no white space at either end (the API strips what it is
    sent). ``read_tokens: [""]`` switched authentication on (and the API onto every address) with a token no request
    can carry."""
    for i, token in enumerate(tokens):
        value = token.get_secret_value()
        if not value.strip():
            raise ValueError(f"token {i} is empty: no request can carry it; remove it")
        if value != value.strip():
            raise ValueError(
                f"token {i} begins or ends with white space, which the API strips from the token it is sent: "
                "no request would match it; remove the white space"
            )
    return tokens
