"""Kubernetes list reads in pages, each object read into the client's model on its own.

As client-go's pager (k8s.io/client-go/tools/pager, ``ListPager``): ``limit`` (500 a page) and the ``continue`` token of
each answer until none is left, so a 50,000-pod list is 100 bodies of 500, not one document; a continue token the API
server no longer serves (410 Gone, "The provided continue parameter is too old ...": its resourceVersion was compacted)
ends the paging with one full list without ``limit``, as client-go's ``FullListIfExpired`` does. Every page is read as
JSON (``_preload_content=False``) and each item through ``read``: the client's models (pydantic in kubernetes 37)
refuse an object missing a field they require, and reading the whole list into them failed the read for one such object
(what a real API server refuses to store, but a proxy or another server may send). ``read`` leaves that object out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PAGE_SIZE = 500  # client-go's pager.defaultPageSize


@dataclass(frozen=True)
class Listed:
    """What a paged list read: the objects ``read`` kept, the list's resourceVersion (where a watch starts), how many
    requests it took and whether an expired continue token made it list again in full."""

    items: list[Any]
    resource_version: str
    requests: int
    relisted: bool


def read_model(model: Any, raw: Any) -> tuple[Any, str]:
    """(``raw`` read into ``model``, "") or (None, why the model refuses it, in a line); an object already read (a test
    double's answer) is kept as it is."""
    if not isinstance(raw, dict):
        return raw, ""
    try:
        return model.from_dict(raw), ""
    except Exception as e:
        return None, " ".join(f"{type(e).__name__}: {e}".split())[:300]


def ref(raw: Any) -> str:
    """namespace/name of a listed object as sent (for the warnings)."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def model_reader(model: Any, what: str) -> Callable[[Any], Any]:
    """``read`` for ``list_pages``: each object into ``model`` (``V1Pod``, ``V1Deployment``...), None with a warning
    when the model refuses it."""

    def read(raw: Any) -> Any:
        got, why = read_model(model, raw)
        if why:
            log.warning("%s %s: the client cannot read it (%s); left out", what, ref(raw), why)
        return got

    return read


def _page(answer: Any, kind: str) -> tuple[list[Any], dict[str, Any]]:
    """(items, list metadata) of one answer: JSON (a urllib3 response), or an answer already read into models."""
    if not hasattr(answer, "release_conn"):  # read by the client (a test double): its items as they are
        meta = getattr(answer, "metadata", None)
        return list(getattr(answer, "items", None) or ()), {
            "resourceVersion": getattr(meta, "resource_version", None),
            "continue": getattr(meta, "_continue", None),
        }
    try:
        body = json.loads(answer.data)
    finally:
        answer.release_conn()
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):  # a proxy's or another server's 200: an error, as the client's model made it
        got = body.get("kind") if isinstance(body, dict) else type(body).__name__
        raise ValueError(f"the answer is not a {kind} (kind {str(got)[:60]!r}, no list of items)")
    meta = body.get("metadata")
    return items, meta if isinstance(meta, dict) else {}


def list_pages(
    call: Callable[..., Any],
    *args: Any,
    read: Callable[[Any], Any],
    kind: str,
    page_size: int = PAGE_SIZE,
    **kwargs: Any,
) -> Listed:
    """Every object ``call`` (a client list method) lists, page by page, each through ``read`` (None: left out).
    ``page_size`` 0 asks for one unpaged list. An ``ApiException`` other than an expired continue is the caller's."""
    from kubernetes.client.exceptions import ApiException

    items: list[Any] = []
    token: str | None = None
    requests = 0
    while True:
        paging: dict[str, Any] = {"limit": page_size} if page_size > 0 else {}
        if token:
            paging["_continue"] = token
        requests += 1
        try:
            raw, meta = _page(call(*args, **kwargs, **paging, _preload_content=False), kind)
        except ApiException as e:
            if e.status != 410 or not token:
                raise
            # client-go's FullListIfExpired: the rest of a consistent snapshot is gone; one full list instead
            log.info("%s: continue token expired (410 Gone) after %d page(s); listing again in full", kind, requests)
            raw, meta = _page(call(*args, **kwargs, _preload_content=False), kind)
            return Listed(_kept(raw, read), str(meta.get("resourceVersion")), requests + 1, relisted=True)
        items.extend(_kept(raw, read))
        del raw
        last, token = token, meta.get("continue") or None
        if token is not None and token == last:  # a server that never moves on: not listed for ever
            raise ValueError(f"the API server answered the same continue token twice ({kind}, page {requests})")
        if token is None:
            return Listed(items, str(meta.get("resourceVersion")), requests, relisted=False)


def _kept(raw: list[Any], read: Callable[[Any], Any]) -> list[Any]:
    return [got for got in map(read, raw) if got is not None]
