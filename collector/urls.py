"""Whether a string is a URL kvpilot can scrape or query (one check for every place a user gives one), and a URL as
kvpilot may show it."""

from __future__ import annotations

import re
import string
from urllib.parse import urlsplit

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@]*):.*@(?=[^@]*$)", re.S)
# A query parameter whose value is a secret: libpq's password= and sslpassword= in a database URL (psycopg takes them),
# and what a scrape target's or Prometheus' URL may carry (token=, access_token=, api_key=, apikey=, key=, secret=,
# client_secret=, auth=, sig=, signature=, X-Amz-Credential=, session=...): a parameter whose name (any case) holds
# pass, pwd, token, secret, key, auth, sig, credential or session. A value masked that was not a secret costs only
# a "***" in a message; one left out would be a credential in logs, pages and Prometheus. A parameter's name runs from
# a ?, & or ; to the first =, &, # or ; after it, its value to the next &, # or ;.
_SECRET_NAME = re.compile(r"pass|pwd|token|secret|key|auth|sig|credential|session", re.I)
_NAME_START = re.compile(r"[?&;]")
_NAME_END = re.compile(r"[=&#;]")
_VALUE_END = re.compile(r"[&#;]")


def _secrets_masked(url: str) -> str:
    """``url`` with the value of each secret query parameter as ``***``, in one pass: a regular expression that
    matched a name holding a secret word took time quadratic in a run of ``?`` or of name characters (a discovered
    pod's path annotation of 64,000 ``?`` held the thread that showed it for 259 s, the event loop with it)."""
    out: list[str] = []
    kept = 0  # url[kept:] not yet copied
    at = 0
    while (start := _NAME_START.search(url, at)) is not None:
        end = _NAME_END.search(url, start.end())
        if end is None:
            break
        # a ? inside a name starts a shorter name with the same end: no other outcome, so it is not tried again
        at = end.start() if end.group() != "=" else end.end()
        if end.group() == "=" and _SECRET_NAME.search(url, start.end(), end.start()):
            value_end = _VALUE_END.search(url, end.end())
            at = value_end.start() if value_end is not None else len(url)
            out += (url[kept : end.end()], "***")
            kept = at
    return "".join(out) + url[kept:] if out else url


# a URL in a text, to its first blank or quote; the authority's user part up to its last @ (``redacted``'s fallback)
_SCHEME_LETTERS = frozenset(string.ascii_letters)
_SCHEME_CHARS = _SCHEME_LETTERS | frozenset(string.digits + "+.-")
_URL_TAIL = re.compile(r"[^\s'\"<>]+")
_AUTHORITY_USER = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def is_http_url(value: str) -> bool:
    """An http(s) URL with a host and, when a port is given, one within 1-65535. ``urlsplit`` raises ValueError on
    some (``http://[::1``, an unclosed IPv6 host; a port past 65535): that is a no here, never a traceback."""
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        return False


def redacted(url: str) -> str:
    """A scrape target's URL as kvpilot shows it: without the user and password of a ``user:password@`` part
    (``redacted@host``) and with the value of a secret query parameter as ``***`` (``password_masked``'s rule,
    ``?token=***``), for logs, /metrics labels, API pages, findings and the CLI: targets from discovery are not held
    to the API's rules and may carry either. Only for showing: a target is known (health, registry, store) by its URL
    as given. It is also the name of a GPU page on no node (``GpuSample.page``, shown as a finding's replica): the same
    for the same URL, at every scrape."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            url = parts._replace(netloc=f"redacted@{parts.netloc.rpartition('@')[2]}").geturl()
    except ValueError:  # a URL urlsplit cannot read (an unclosed IPv6 host): its authority cut at its last @ alike
        url = _AUTHORITY_USER.sub(r"\g<scheme>redacted@", url, count=1)
    return _secrets_masked(url) if "=" in url else url  # the common target: no scan


def page_name(url: str) -> str:
    """The name of a GPU page that places its GPUs on no node (``GpuSample.page``): its URL without the user and
    password of a ``user:password@`` part (``redacted@host``), as since session 13, and otherwise as given. A key
    (the page's GPUs, its node in ``gpu_nodes_scraped``, its shard, its down finding's subject), so a query is kept:
    two pages that differ only in a token stay two. Shown, it is shown as ``masked_in`` shows a name."""
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _AUTHORITY_USER.sub(r"\g<scheme>redacted@", url, count=1)
    return parts._replace(netloc=f"redacted@{parts.netloc.rpartition('@')[2]}").geturl() if "@" in parts.netloc else url


def masked_in(text: str) -> str:
    """``text`` with each URL in it shown as ``redacted`` shows it, the rest as it is: for names that may be a
    target's URL (a replica on no pod is named by its page's URL, a GPU page on no node by its own) and the texts
    that hold them (a finding's summary), wherever they are shown (/metrics labels, the API, the CLI)."""
    if "://" not in text:
        return text
    # Each URL: a scheme (a letter, then letters, digits, +, . or -) up to ://, and what follows to a blank or quote.
    # Found from each :// back to the first letter of the scheme characters before it, in one pass: a regular
    # expression tried at every letter of a long run of them not followed by :// took quadratic time.
    out: list[str] = []
    kept = 0  # text[kept:] not yet copied
    at = 0
    while (sep := text.find("://", at)) != -1:
        start = sep
        while start > kept and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < sep and text[start] not in _SCHEME_LETTERS:
            start += 1
        tail = _URL_TAIL.match(text, sep + 3) if start < sep else None
        if tail is None:
            at = sep + 1
            continue
        out += (text[kept:start], redacted(text[start : tail.end()]))
        kept = at = tail.end()
    return "".join(out) + text[kept:] if out else text


def password_masked(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part as ``***`` (the user and host kept, to say which), for
    the URLs an operator configures (``collector.discovery.promql_url``, whose password is sent as Basic auth, and
    ``store.database_url``) wherever kvpilot shows them: log lines, error texts, ``kvpilot config show``. Read as
    SQLAlchemy reads a database URL: the password runs to the last ``@`` (an unescaped ``/`` or ``@`` in it too). A
    password given as libpq's ``password=`` (or ``sslpassword=``) query parameter, which psycopg takes, is ``***``
    too (config show, kvpilot db and kvpilot run's start line printed it), as is any secret query parameter
    (``?token=``, ``api_key=``..., see ``_SECRET_NAME``): the one rule for every URL kvpilot shows."""
    if not url:
        return url
    masked = _USERINFO.sub(r"\g<scheme>\g<user>:***@", url, count=1)
    return _secrets_masked(masked) if "=" in masked else masked
