"""What kvpilot accepts as a scrape target, a Kubernetes name or a piece of operator text, checked at the edge:
the API's bodies and the configuration file share ``TargetSpec``, so both refuse the same things with the same
one-line reasons. And ``fit``: scraped values (model names, pod-less replica names) are clipped to their column
before a write, so the store never refuses a row for its width.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from collector.roles import split_pool_key
from collector.urls import redacted

# Kubernetes' own rules: kubernetes/apimachinery, pkg/util/validation/validation.go (dns1123LabelFmt,
# DNS1123LabelMaxLength = 63, dns1123SubdomainFmt, DNS1123SubdomainMaxLength = 253; unchanged since v0.17.2).
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
RFC1123_LABEL = re.compile(f"^{_LABEL}$")
RFC1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

# Column widths (store.models): a deployment key is "namespace/name" in 253, so a name gets 253 - 63 - 1.
DEPLOYMENT_NAME_MAX = SUBDOMAIN_MAX - LABEL_MAX - 1
URL_MAX = 2048
ENGINE_MAX = 32
TEXT_MAX = 2000

# The engines kvpilot has adapters for (collector.engines.ENGINES); kept here as names so that validating a
# configuration does not import the parsers.
KNOWN_ENGINES = ("vllm", "sglang", "tgi", "trtllm", "trtllm-pytorch", "llamacpp", "nim", "mindie", "dynamo")

_BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def bad_characters(value: str) -> str | None:
    """Why ``value`` cannot be stored or logged faithfully, or None: control characters (NUL above all, which
    PostgreSQL refuses), lone surrogates (not encodable as UTF-8) and bidirectional overrides (text that reads
    differently from what it is)."""
    for ch in value:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            return f"a lone surrogate (U+{code:04X})"
        cat = unicodedata.category(ch)
        if cat == "Cc" and ch not in "\t\n":
            return f"a control character (U+{code:04X})"
        if cat == "Cf" and unicodedata.bidirectional(ch) in _BIDI_CONTROLS:
            return f"a bidirectional control (U+{code:04X})"
    return None


def check_text(value: str) -> str:
    why = bad_characters(value)
    if why is not None:
        raise ValueError(f"contains {why}")
    return value


def _name_check(rule: re.Pattern[str], max_len: int, what: str, *, allow_empty: bool) -> AfterValidator:
    def check(value: str) -> str:
        if value == "" and allow_empty:
            return value
        if len(value) > max_len:
            raise ValueError(f"{what} is {len(value)} characters, Kubernetes allows {max_len}")
        if not rule.match(value):
            raise ValueError(
                f"{what} {value!r} is not a Kubernetes name: lower-case letters, digits and '-'"
                + (" or '.'" if rule is RFC1123_SUBDOMAIN else "")
                + ", starting and ending with a letter or digit"
            )
        return value

    return AfterValidator(check)


def check_url(value: str) -> str:
    """An http(s) URL with a host, a port within 1–65535 when given, no credentials and no spaces."""
    if len(value) > URL_MAX:
        raise ValueError(f"url is {len(value)} characters, at most {URL_MAX}")
    why = bad_characters(value)
    if why is not None or any(ch.isspace() for ch in value):
        raise ValueError(f"url contains {why or 'white space'}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"url must start with http:// or https://, got scheme {parts.scheme or 'none'!r}")
    if "@" in parts.netloc:
        raise ValueError("url must not carry credentials (user:password@); kvpilot would show them in labels")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("url has a port outside 1-65535") from None
    if not parts.hostname:
        raise ValueError("url has no host")
    if port == 0:
        raise ValueError("url has a port outside 1-65535")
    return value


def normalise_engine(value: str | None) -> str | None:
    """None (detect from the page) or one of ``KNOWN_ENGINES``, matched case-insensitively."""
    if value is None or value == "":
        return None
    name = value.strip().lower()
    if name not in KNOWN_ENGINES:
        raise ValueError(f"unknown engine {value[:40]!r}; known: {', '.join(KNOWN_ENGINES)} (or leave it out)")
    return name


def _strict_str(value: object) -> object:
    """Text only: a number or a list where a name belongs is a mistake, not something to coerce."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    return value


def _described(pattern: str, max_length: int | None = None) -> Any:
    """The rule as OpenAPI states it (for clients and schema-driven tests), not enforced by it: the validators
    above enforce it, with messages that say what is wrong instead of "should match pattern"."""
    extra: dict[str, Any] = {"pattern": pattern}
    if max_length is not None:
        extra["maxLength"] = max_length
    return Field(json_schema_extra=extra)


_LABEL_RE = f"^{_LABEL}$"
_SUBDOMAIN_RE = rf"^({_LABEL}(\.{_LABEL})*)?$"
_PORT = "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# Host names and IPv4 only: bracketed IPv6 literals are accepted too, but their rule is no pattern a reader wants.
_URL_RE = rf"^https?://[A-Za-z0-9][-A-Za-z0-9.]*(:{_PORT})?(/[!-~]*)?$"
_TEXT_RE = "^[^\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]*$"

Text = Annotated[str, AfterValidator(check_text), _described(_TEXT_RE)]
Namespace = Annotated[
    str,
    BeforeValidator(_strict_str),
    _name_check(RFC1123_LABEL, LABEL_MAX, "namespace", allow_empty=False),
    _described(_LABEL_RE, LABEL_MAX),
]
DeploymentName = Annotated[
    str,
    BeforeValidator(_strict_str),
    _name_check(RFC1123_SUBDOMAIN, DEPLOYMENT_NAME_MAX, "deployment", allow_empty=True),
    _described(_SUBDOMAIN_RE, DEPLOYMENT_NAME_MAX),
]
PodName = Annotated[
    str,
    BeforeValidator(_strict_str),
    _name_check(RFC1123_SUBDOMAIN, SUBDOMAIN_MAX, "pod", allow_empty=True),
    _described(_SUBDOMAIN_RE, SUBDOMAIN_MAX),
]
NodeName = Annotated[
    str,
    BeforeValidator(_strict_str),
    _name_check(RFC1123_SUBDOMAIN, SUBDOMAIN_MAX, "node", allow_empty=True),
    _described(_SUBDOMAIN_RE, SUBDOMAIN_MAX),
]
TargetUrl = Annotated[str, BeforeValidator(_strict_str), AfterValidator(check_url), _described(_URL_RE, URL_MAX)]
Engine = Annotated[
    str | None,
    BeforeValidator(_strict_str),
    AfterValidator(normalise_engine),
    Field(json_schema_extra={"enum": [*KNOWN_ENGINES, None]}),
]


class TargetSpec(BaseModel):
    """One scrape target as an operator writes it, in a ``POST /v1/targets`` body or the configuration file."""

    model_config = ConfigDict(extra="forbid")

    url: TargetUrl = Field(description="The target's /metrics URL.")
    kind: Literal["engine", "gpu"] = Field(
        default="engine", description="`engine` (an inference server) or `gpu` (dcgm-exporter)."
    )
    engine: Engine = Field(
        default=None, description="Engine name (see docs/engines.md); unset: detected from the page."
    )
    namespace: Namespace = Field(default="default", description="Namespace the replica is reported under.")
    deployment: DeploymentName = Field(default="", description="Deployment the replica belongs to (the scaling unit).")
    pod: PodName = Field(default="", description="Replica name; unset: the URL.")
    node: NodeName = Field(default="", description="Node the replica or GPUs run on (joins replicas to GPUs).")


def is_deployment_key(key: str) -> bool:
    """``namespace/name`` by the rules above (or a pool of one, ``namespace/name@prefill``: collector.roles): what a
    stored decision must be to be published again."""
    ns, sep, name = split_pool_key(key)[0].partition("/")
    return (
        bool(sep)
        and len(ns) <= LABEL_MAX
        and bool(RFC1123_LABEL.match(ns))
        and len(name) <= DEPLOYMENT_NAME_MAX
        and bool(RFC1123_SUBDOMAIN.match(name))
    )


def fit(value: str, width: int) -> str:
    """``value`` made storable in a column of ``width`` characters: NUL and lone surrogates replaced, and when too
    long, clipped with a short digest of the whole so that two long values that differ stay different."""
    if "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        value = "".join("\ufffd" if c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if len(value) <= width:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    return value[: width - 9] + "~" + digest


def fit_optional(value: str | None, width: int) -> str | None:
    return None if value is None else fit(value, width)


# ``url`` without the user and password of a ``user:password@`` part (``redacted@host``), for labels, logs and
# listings: targets from discovery are not checked by ``check_url`` and may carry them. One helper for the collector's
# messages and the store's (was a copy of it here).
redact_url = redacted
