"""Whether a string is a URL kvpilot can scrape or query (one check for every place a user gives one), and a URL as
kvpilot may show it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@]*):.*@(?=[^@]*$)", re.S)
# libpq's connection parameters that hold a password, given in a database URL's query (psycopg takes them)
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&](?:ssl)?password=)[^&#]*")


def is_http_url(value: str) -> bool:
    """An http(s) URL with a host and, when a port is given, one within 1-65535. ``urlsplit`` raises ValueError on
    some (``http://[::1``, an unclosed IPv6 host; a port past 65535): that is a no here, never a traceback."""
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        return False


def redacted(url: str) -> str:
    """``url`` without the user and password of a ``user:password@`` part (``redacted@host``), for logs, labels and
    findings: targets from discovery are not held to the API's rules and may carry them."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"redacted@{parts.netloc.rpartition('@')[2]}").geturl() if "@" in parts.netloc else url


def password_masked(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part as ``***`` (the user and host kept, to say which), for
    the URLs an operator configures (``collector.discovery.promql_url``, whose password is sent as Basic auth, and
    ``store.database_url``) wherever kvpilot shows them: log lines, error texts, ``kvpilot config show``. Read as
    SQLAlchemy reads a database URL: the password runs to the last ``@`` (an unescaped ``/`` or ``@`` in it too). A
    password given as libpq's ``password=`` (or ``sslpassword=``) query parameter, which psycopg takes, is ``***``
    too (config show, kvpilot db and kvpilot run's start line printed it)."""
    if not url:
        return url
    return _QUERY_PASSWORD.sub(r"\g<key>***", _USERINFO.sub(r"\g<scheme>\g<user>:***@", url, count=1))
