"""How Kubernetes discovery's calls are tried again inside urllib3: a GET the API server never answered because the
pooled connection it went out on was closed meanwhile (an idle timeout of the server or a load balancer) is sent once
more on another connection, quietly; anything else fails at once, for discovery to count and retry itself.

With no retries at all (session 29, 707c40a, which silenced urllib3's three "Retrying" warnings before each failure
while the API server was away), such a closed connection cost a failed try, ``retry_delay_s`` (2 s) and a full
relist of the pods. A refused or timed-out connection and a read that times out are still one try each: a server
that is away or hangs costs one timeout, not two."""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

RETRIED_METHODS = frozenset({"GET"})  # reads: sending one again changes nothing


def once_on_a_closed_connection() -> Any:
    """A ``urllib3.util.Retry`` for ``kubernetes.client.Configuration.retries``: one more try of a GET whose
    connection broke before its answer (``ProtocolError``: the server closed it, or reset it), none of anything else;
    urllib3's "Retrying" warning for it is not said (``_QuietRetries``)."""
    kind = _retry_kind()
    _quiet_retry_warnings(kind)
    return kind(
        total=1, connect=0, read=1, redirect=0, status=0, other=0, allowed_methods=RETRIED_METHODS, backoff_factor=0
    )


@cache
def _retry_kind() -> type:
    from urllib3.exceptions import ProtocolError
    from urllib3.util.retry import Retry

    class OnceOnAClosedConnection(Retry):
        def _is_read_error(self, err: Exception) -> bool:  # a read timeout counts as "other": not tried again
            return isinstance(err, ProtocolError)

    return OnceOnAClosedConnection


class _QuietRetries(logging.Filter):
    """Drops urllib3's "Retrying (...) after connection broken" warning where the retry is ours (its first argument
    is a ``kinds`` instance): a closed idle connection is routine, and said nothing before urllib3 retried it."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: tuple[type, ...] = ()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if args and isinstance(args[0], self.kinds):
            why = args[1] if len(args) > 1 else ""
            log.debug("kubernetes discovery: a GET sent again on another connection (%r)", why)
            return False
        return True


_FILTER = _QuietRetries()


def _quiet_retry_warnings(kind: type) -> None:
    _FILTER.kinds = (kind,)
    pool_log = logging.getLogger("urllib3.connectionpool")
    if _FILTER not in pool_log.filters:
        pool_log.addFilter(_FILTER)
