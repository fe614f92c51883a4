"""Whether a string is a URL kvpilot can scrape or query (one check for every place a user gives one), and a URL as
kvpilot may show it."""

from __future__ import annotations

import re
import string
import threading
from collections.abc import Iterable
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


def _masked(url: str) -> str:
    """``url`` without the user and password of a ``user:password@`` part (``redacted@host``) and with the value of a
    secret query parameter as ``***``: what every target that shows alike shares."""
    if "@" not in url:  # the common target: no user part, so no parse (meet runs this for every target each tick)
        return _secrets_masked(url) if "=" in url else url
    try:
        parts = urlsplit(url)
        if "@" in parts.netloc:
            url = parts._replace(netloc=f"redacted@{parts.netloc.rpartition('@')[2]}").geturl()
    except ValueError:  # a URL urlsplit cannot read (an unclosed IPv6 host): its authority cut at its last @ alike
        url = _AUTHORITY_USER.sub(r"\g<scheme>redacted@", url, count=1)
    return _secrets_masked(url) if "=" in url else url


class _Names:
    """The number each target whose URL carries a secret is shown with. Masked, two targets that differ only in
    their secret (``?token=a``, ``?token=b``) would show alike: the same label set twice on /metrics, two findings
    nobody can tell apart. The first met keeps the masked URL as its name; each later one that shows alike is
    numbered (``#2``, ``#3``...) in the order met, the scrape loop's order of its targets (``meet``), so the same
    configuration names them alike after a restart. Nothing of a secret goes into a name (a digest of a short token
    would give it away to a guess), and a number, once given, stays that target's for the process' life (a target
    that leaves and comes back keeps it; none moves to another, which would put one target's history under another's
    name). Only the URLs' hashes are kept (a discovered URL may run to 256 KiB), at most ``LIMIT`` of them (a
    discovery's churn): past it a new target shows masked, unnumbered."""

    LIMIT = 65_536

    def __init__(self) -> None:
        self._numbers: dict[int, int] = {}  # hash of a URL (and, for a user:password@, of its page name) -> number
        self._next: dict[int, int] = {}  # hash of a masked URL -> the next number to give those that show so
        self._taken: set[int] = set()  # hashes of the names given
        self._lock = threading.Lock()  # numbers are given from the loop's thread and from the API's and page's

    def number(self, url: str) -> int | None:
        return self._numbers.get(hash(url))

    def give(self, url: str, masked: str) -> int:
        with self._lock:
            n = self._numbers.get(hash(url))
            if n is not None:
                return n
            if len(self._numbers) >= self.LIMIT:
                return 1
            n = self._next.get(hash(masked), 1)
            while hash(_numbered(masked, n)) in self._taken:  # a name a URL holds as it is (``...#2`` as given)
                n += 1
            self._taken.add(hash(_numbered(masked, n)))
            self._next[hash(masked)] = n + 1
            self._numbers[hash(url)] = n
            if "@" in url:  # a GPU page on no node is keyed by its page name (``page_name``): shown by the same name
                self._numbers.setdefault(hash(page_name(url)), n)
            return n

    def forget(self) -> None:
        with self._lock:
            self._numbers.clear()
            self._next.clear()
            self._taken.clear()


_NAMES = _Names()


def _numbered(masked: str, n: int) -> str:
    return masked if n == 1 else f"{masked}#{n}"


def meet(urls: Iterable[str]) -> None:
    """Number, in their order, the targets the scrape loop lists (``Collector.collect_once``, each tick; the CLI's
    targets): of targets that show alike, the one listed first keeps the masked URL, the others are numbered. A URL
    whose secret is the mask itself (``?token=***``, ``redacted@``) shows alike with the others too."""
    for url in urls:
        if ("@" in url or "=" in url) and _NAMES.number(url) is None:
            masked = _masked(url)
            if masked != url or "***" in url or "redacted@" in url:
                _NAMES.give(url, masked)


def forget_names() -> None:
    """Every number given so far forgotten (for tests: each meets its targets afresh)."""
    _NAMES.forget()


def redacted(url: str) -> str:
    """A scrape target's URL as kvpilot shows it: without the user and password of a ``user:password@`` part
    (``redacted@host``) and with the value of a secret query parameter as ``***`` (``password_masked``'s rule,
    ``?token=***``), for logs, /metrics labels, API pages, findings and the CLI: targets from discovery are not held
    to the API's rules and may carry either. Two targets that differ only in what is masked are shown apart (``#2``,
    see ``_Names``): the same name for the same URL, every time. Only for showing: a target is known (health,
    registry, store) by its URL as given. A name already shown (a stored summary read again) is shown as it is."""
    if not url:
        return url
    masked = _masked(url)
    n = _NAMES.number(url) if masked != url or "***" in url or "redacted@" in url else None
    if n is None:
        if masked == url:
            return url
        n = _NAMES.give(url, masked)
    return _numbered(masked, n)


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
        out += (text[kept:start], _shown_in_text(text[start : tail.end()]))
        kept = at = tail.end()
    return "".join(out) + text[kept:] if out else text


_AFTER_URL = ".,:;)]!"  # what follows a URL in a sentence ("<replica>: <text>", "(<url>).")


def _shown_in_text(url: str) -> str:
    """A URL found in a text (it runs to a blank or quote) as ``redacted`` shows it. Where it is met nowhere but,
    without the punctuation a sentence puts after it, is a target met (kv_exhaustion's "<replica>: ..."), that target's
    name then the punctuation: read with its colon, it was given a number of its own (``#3``), a target that does
    not exist. At most two shorter reads, whatever the run of punctuation."""
    if url[-1] in _AFTER_URL and _NAMES.number(url) is None:
        for bare in (url[:-1], url.rstrip(_AFTER_URL)):
            if _NAMES.number(bare) is not None:
                return redacted(bare) + url[len(bare) :]
    return redacted(url)


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
