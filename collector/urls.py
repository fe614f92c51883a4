"""Whether a string is a URL kvpilot can scrape or query: one check for every place a user gives one."""

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
