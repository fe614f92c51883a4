"""Whether a string is a URL kvpilot can scrape or query (one check for every place a user gives one), and a URL as
kvpilot may show it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@]*):.*@(?=[^@]*$)", re.S)
# A query parameter whose value is a secret: libpq's password= and sslpassword= in a database URL (psycopg takes them),
# and what a scrape target's or Prometheus' URL may carry (token=, access_token=, api_key=, apikey=, key=, secret=,
# client_secret=, auth=, sig=, signature=, X-Amz-Credential=, session=...): a parameter whose name (any case) holds
# pass, pwd, token, secret, key, auth, sig, credential or session. A value masked that was not a secret costs only
# a "***" in a message; one left out would be a credential in logs, pages and Prometheus.
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;][^=&#;]*(?:pass|pwd|token|secret|key|auth|sig|credential|session)[^=&#;]*=)[^&#;]*", re.I
)


# a URL in a text, to its first blank or quote; the authority's user part up to its last @ (``redacted``'s fallback)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
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
    return _QUERY_SECRET.sub(r"\g<key>***", url) if "=" in url else url  # the common target: no regex run


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
    return _URL_IN_TEXT.sub(lambda m: redacted(m.group()), text) if "://" in text else text


def password_masked(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part as ``***`` (the user and host kept, to say which), for
    the URLs an operator configures (``collector.discovery.promql_url``, whose password is sent as Basic auth, and
    ``store.database_url``) wherever kvpilot shows them: log lines, error texts, ``kvpilot config show``. Read as
    SQLAlchemy reads a database URL: the password runs to the last ``@`` (an unescaped ``/`` or ``@`` in it too). A
    password given as libpq's ``password=`` (or ``sslpassword=``) query parameter, which psycopg takes, is ``***``
    too (config show, kvpilot db and kvpilot run's start line printed it), as is any secret query parameter
    (``?token=``, ``api_key=``..., see ``_QUERY_SECRET``): the one rule for every URL kvpilot shows."""
    if not url:
        return url
    masked = _USERINFO.sub(r"\g<scheme>\g<user>:***@", url, count=1)
    return _QUERY_SECRET.sub(r"\g<key>***", masked) if "=" in masked else masked
