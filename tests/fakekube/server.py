"""An in-process fake Kubernetes API server that the official ``kubernetes`` client talks to over HTTP.

Routes ``/api/v1/...`` and ``/apis/<group>/<version>/...`` for every type in ``store.RESOURCES``: list
(label and field selectors; ``limit`` and ``continue`` pages, 410 Expired for a compacted continue token: see
``Store.list_page`` for what is simplified), watch (JSON lines, from a resourceVersion, ``timeoutSeconds``,
410 Gone when compacted), get, create, replace (409 on a stale resourceVersion), patch (merge, strategic-as-merge, JSON
patch) and delete, with errors as ``Status`` objects. Subresources are handlers in ``FakeKube.subresources``
keyed by ``(plural, subresource)``; see README.md for how to add one (evictions, scale).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakekube.store import (
    RESOURCES,
    ApiError,
    Obj,
    ResourceType,
    Store,
    field_selector_matches,
    label_selector_matches,
    status_object,
)


@dataclass
class Request:
    """What a subresource handler gets."""

    method: str
    resource: ResourceType
    namespace: str  # "" for cluster-scoped resources
    name: str
    subresource: str
    body: Any
    query: dict[str, str]
    content_type: str = ""


Handler = Callable[["FakeKube", Request], tuple[int, Obj]]


def _status_subresource(kube: FakeKube, req: Request) -> tuple[int, Obj]:
    """``/status``: the same object; writes go through the store like the main resource."""
    if req.method == "GET":
        return 200, kube.store.get(req.resource, req.namespace, req.name)
    if req.method == "PUT":
        return 200, kube.store.replace(req.resource, req.namespace, req.name, req.body)
    if req.method == "PATCH":
        return 200, kube.store.patch(req.resource, req.namespace, req.name, req.body, req.content_type)
    raise ApiError(405, "MethodNotAllowed", f"{req.method} not allowed on {req.resource.plural}/status")


@dataclass
class _Route:
    resource: ResourceType
    namespace: str | None  # None: all namespaces (list/watch) or cluster-scoped
    name: str | None
    subresource: str | None


def _route(path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        gv, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or (gv, rest[0]) not in RESOURCES:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    rt = RESOURCES[(gv, rest[0])]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if rt.namespaced and name is not None and namespace is None:
        raise ApiError(404, "NotFound", f"{rt.plural} is namespaced: use /namespaces/<ns>/{rt.plural}/{name}")
    return _Route(rt, namespace if rt.namespaced else "", name, sub)


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up before its answer was written (a request timeout, a cancelled watch) is the client's
    business, as on a real API server: socketserver's default prints that BrokenPipe's traceback to sys.stderr from a
    handler thread, seconds later, into whichever test has stderr captured then (a CliRunner's JSON output)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


@dataclass
class FakeKube:
    """The server plus its store. ``subresources`` maps ``(plural, subresource)`` to a handler."""

    store: Store = field(default_factory=Store)
    subresources: dict[tuple[str, str], Handler] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request
    # A test's stand-in for an API server shedding load or refusing: (method, path) -> an ApiError answered instead
    # of the request (None: served as usual). The store is not touched by a request it answers.
    intercept: Callable[[str, str], ApiError | None] | None = None
    default_watch_timeout_s: float = 60.0
    _server: ThreadingHTTPServer | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _connections: set[socket.socket] = field(default_factory=set)

    def __post_init__(self) -> None:
        for rt in RESOURCES.values():
            self.subresources.setdefault((rt.plural, "status"), _status_subresource)

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeKube:
        kube = self

        class _Bound(_KubeHandler):
            fake = kube

        self._server = _QuietServer(("127.0.0.1", 0), _Bound)
        self._server.daemon_threads = True
        # stop() waits for serve_forever to notice the shutdown: at its default 0.5 s poll that was most of a
        # test's teardown; at 20 ms it costs nothing measurable while idle.
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fakekube", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self.store.changed:
            self.store.changed.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        # An outage, not a polite goodbye: kept-alive client connections must break too.
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeKube.start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` pointed at this server (no auth, no TLS)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    # -- convenience for tests ---------------------------------------------------------------------

    def resource(self, plural: str) -> ResourceType:
        found = [rt for rt in RESOURCES.values() if rt.plural == plural]
        if len(found) != 1:
            raise KeyError(f"no single resource type named {plural!r}")
        return found[0]

    def create(self, plural: str, obj: Obj, namespace: str = "default") -> Obj:
        rt = self.resource(plural)
        ns = obj.get("metadata", {}).get("namespace", namespace) if rt.namespaced else ""
        return self.store.create(rt, ns, obj)

    def get(self, plural: str, name: str, namespace: str = "default") -> Obj:
        return self.store.get(self.resource(plural), namespace, name)

    def patch(self, plural: str, name: str, patch: Obj, namespace: str = "default") -> Obj:
        return self.store.patch(self.resource(plural), namespace, name, patch, "application/merge-patch+json")

    def delete(self, plural: str, name: str, namespace: str = "default") -> Obj:
        return self.store.delete(self.resource(plural), namespace, name)


class _KubeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: with Nagle on, every answer waited ~40 ms for a delayed ACK.
    disable_nagle_algorithm = True
    fake: FakeKube

    def log_message(self, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.fake._connections.add(self.connection)

    def finish(self) -> None:
        self.fake._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"request body is not JSON: {e}") from None

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        self.fake.requests.append((method, split.path))
        try:
            body = self._body()
            refused = self.fake.intercept(method, split.path) if self.fake.intercept is not None else None
            if refused is not None:
                raise refused
            route = _route(split.path)
            if method == "GET" and route.name is None and query.get("watch") in ("true", "1"):
                self._watch(route, query)
                return
            code, obj = self._dispatch(method, route, body, query)
        except ApiError as e:
            if e.plain_text:
                self._send_text(e.code, e.message, e.retry_after_s)
                return
            code, obj = e.code, e.status()
        except (KeyError, TypeError, ValueError) as e:
            code, obj = 400, status_object(400, "BadRequest", f"{type(e).__name__}: {e}")
        self._send(code, obj)

    def _dispatch(self, method: str, route: _Route, body: Any, query: dict[str, str]) -> tuple[int, Obj]:
        store, rt = self.fake.store, route.resource
        ns = route.namespace or ""
        if route.subresource is not None:
            assert route.name is not None
            handler = self.fake.subresources.get((rt.plural, route.subresource))
            if handler is None:
                raise ApiError(404, "NotFound", f"{rt.plural}/{route.subresource} is not served by the fake")
            req = Request(
                method, rt, ns, route.name, route.subresource, body, query, self.headers.get("Content-Type", "")
            )
            return handler(self.fake, req)
        if route.name is None:
            if method == "GET":
                limit = query.get("limit") or "0"
                if not limit.isdigit():
                    raise ApiError(400, "BadRequest", f"limit {limit!r} is not a number")
                items, rv, token, remaining = store.list_page(
                    rt,
                    route.namespace if (rt.namespaced and route.namespace) else None,
                    label_selector=query.get("labelSelector"),
                    field_selector=query.get("fieldSelector"),
                    limit=int(limit),
                    continue_token=query.get("continue"),
                )
                meta: Obj = {"resourceVersion": str(rv)}
                if token is not None:
                    meta["continue"] = token
                if remaining is not None:
                    meta["remainingItemCount"] = remaining
                return 200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "create needs a JSON object")
                return 201, store.create(rt, ns, body)
        else:
            if method == "GET":
                return 200, store.get(rt, ns, route.name)
            if method == "PUT":
                return 200, store.replace(rt, ns, route.name, body)
            if method == "PATCH":
                return 200, store.patch(rt, ns, route.name, body, self.headers.get("Content-Type", ""))
            if method == "DELETE":
                return 200, store.delete(rt, ns, route.name)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _send(self, code: int, obj: Obj) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        retry_after = (obj.get("details") or {}).get("retryAfterSeconds") if obj.get("kind") == "Status" else None
        if retry_after:  # as the API server writes a Status with retryAfterSeconds (429, 503)
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(raw)

    def _send_text(self, code: int, message: str, retry_after_s: int) -> None:
        """As Go's http.Error writes it (the API server's throttling filters): text/plain, the message and a newline."""
        raw = message.encode() + b"\n"
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(raw)))
        if retry_after_s > 0:
            self.send_header("Retry-After", str(retry_after_s))
        self.end_headers()
        self.wfile.write(raw)

    def _chunk(self, obj: Obj) -> None:
        line = json.dumps(obj).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()

    def _watch(self, route: _Route, query: dict[str, str]) -> None:
        store, rt = self.fake.store, route.resource
        timeout_s = float(query.get("timeoutSeconds") or self.fake.default_watch_timeout_s)
        deadline = time.monotonic() + timeout_s
        namespace = route.namespace if (rt.namespaced and route.namespace) else None
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        epoch = store.watch_epoch
        try:
            rv_param = query.get("resourceVersion")
            if not rv_param or rv_param == "0":
                # No starting point: the current objects as ADDED, then changes (as the API server does).
                items, rv = store.list(rt, namespace, label_selector=labels, field_selector=fields)
                for item in items:
                    self._chunk({"type": "ADDED", "object": item})
            else:
                rv = int(rv_param)
            while not self.fake._stopping.is_set():
                if rv < store.oldest_watchable() or store.watch_epoch != epoch:  # compacted, fell behind, expired
                    gone = f"too old resource version: {rv} ({store.oldest_watchable() + 1})"
                    self._chunk({"type": "ERROR", "object": status_object(410, "Expired", gone)})
                    return
                for event in store.events_since(rv):
                    rv = event.rv
                    if event.resource != rt:
                        continue
                    meta = event.obj.get("metadata", {})
                    if namespace is not None and meta.get("namespace") != namespace:
                        continue
                    if not (
                        label_selector_matches(labels, meta.get("labels")) and field_selector_matches(fields, event.obj)
                    ):
                        continue
                    self._chunk({"type": event.type, "object": event.obj})
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                with store.changed:
                    if not store.events_since(rv):
                        store.changed.wait(min(remaining, 0.5))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        finally:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True
