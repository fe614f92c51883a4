"""Whether a string is a URL kvpilot can scrape or query (one check for every place a user gives one), and a URL as
kvpilot may show it."""

from __future__ import annotations

from urllib.parse import urlsplit


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
