"""The fake API server's in-memory object store: generic over resource types, with the semantics kvpilot
relies on — a cluster-wide resourceVersion, optimistic concurrency (409 on a stale PUT), label and field
selectors, and a bounded event log that watches replay from, answering 410 Gone once compacted."""

from __future__ import annotations

import base64
import bisect
import copy
import itertools
import json
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    group_version: str  # "v1", "apps/v1", ...
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return self.group_version


RESOURCES: dict[tuple[str, str], ResourceType] = {
    (r.group_version, r.plural): r
    for r in (
        ResourceType("v1", "pods", "Pod"),
        ResourceType("v1", "nodes", "Node", namespaced=False),
        ResourceType("v1", "namespaces", "Namespace", namespaced=False),
        ResourceType("apps/v1", "deployments", "Deployment"),
        ResourceType("apps/v1", "replicasets", "ReplicaSet"),
        ResourceType("apps/v1", "statefulsets", "StatefulSet"),
        ResourceType("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"),
        ResourceType("coordination.k8s.io/v1", "leases", "Lease"),
    )
}


class ApiError(Exception):
    """Raised inside the store; the server turns it into a Kubernetes ``Status`` object (``plain_text``: the message
    as a text/plain body instead, as the API server's own filters write theirs, ``throttled``)."""

    def __init__(
        self, code: int, reason: str, message: str, *, name: str = "", kind: str = "", retry_after_s: int = 0,
        causes: list[Obj] | None = None, plain_text: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.code, self.reason, self.message, self.name, self.kind = code, reason, message, name, kind
        self.retry_after_s = retry_after_s  # > 0: details.retryAfterSeconds and a Retry-After header, as the API server
        self.causes = causes  # details.causes: [{"reason": ..., "message": ...}] (metav1.StatusCause)
        self.plain_text = plain_text

    def status(self) -> Obj:
        return status_object(
            self.code, self.reason, self.message, name=self.name, kind=self.kind, retry_after_s=self.retry_after_s,
            causes=self.causes,
        )  # fmt: skip


# What API Priority and Fairness (and --max-requests-inflight) answer a request they reject: 429 with this text as a
# plain body (http.Error, no Status object) and a Retry-After header (k8s.io/apiserver/pkg/server/filters).
THROTTLED = "Too many requests, please try again later."


def throttled(retry_after_s: int = 1) -> ApiError:
    """The API server shedding load, as its filters answer it (for ``FakeKube.intercept``)."""
    return ApiError(429, "TooManyRequests", THROTTLED, retry_after_s=retry_after_s, plain_text=True)


# The API server's message for a continue token whose resourceVersion was compacted (apiserver storage errors,
# NewResourceExpiredError via etcd3's "continue" handling).
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def _continue_token(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _read_continue(token: str) -> tuple[int, str]:
    try:
        got = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(got["rv"]), str(got["start"])
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", f"continue key is not valid: {token[:60]}") from None


def status_object(
    code: int,
    reason: str,
    message: str,
    *,
    name: str = "",
    kind: str = "",
    retry_after_s: int = 0,
    causes: list[Obj] | None = None,
) -> Obj:
    details: Obj = {}
    if name:
        details["name"] = name
    if kind:
        details["kind"] = kind
    if retry_after_s > 0:
        details["retryAfterSeconds"] = retry_after_s
    if causes:
        details["causes"] = causes
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: ResourceType
    obj: Obj


def _get_path(obj: Obj, dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _parse_label_selector(selector: str) -> list[tuple[str, str, set[str]]]:
    """``a=b,c!=d,e in (f,g),h notin (i),j,!k`` -> (key, op, values) terms (all must hold)."""
    terms: list[tuple[str, str, set[str]]] = []
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur)
    for raw in (p.strip() for p in parts):
        if not raw:
            continue
        for op in (" notin ", " in "):
            if op in raw:
                key, _, vals = raw.partition(op)
                values = {v.strip() for v in vals.strip().strip("()").split(",")}
                terms.append((key.strip(), op.strip(), values))
                break
        else:
            if "!=" in raw:
                key, _, val = raw.partition("!=")
                terms.append((key.strip(), "!=", {val.strip()}))
            elif "=" in raw:
                key, _, val = raw.replace("==", "=").partition("=")
                terms.append((key.strip(), "=", {val.strip()}))
            elif raw.startswith("!"):
                terms.append((raw[1:].strip(), "!exists", set()))
            else:
                terms.append((raw, "exists", set()))
    return terms


def label_selector_matches(selector: str | None, labels: dict[str, str] | None) -> bool:
    if not selector:
        return True
    labels = labels or {}
    for key, op, values in _parse_label_selector(selector):
        present = key in labels
        if op == "=" and labels.get(key) not in values:
            return False
        if op == "!=" and present and labels[key] in values:
            return False
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and present and labels[key] in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


def field_selector_matches(selector: str | None, obj: Obj) -> bool:
    """``spec.nodeName=n1,metadata.name!=x``: any dotted path, ``=``/``==``/``!=``."""
    if not selector:
        return True
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            path, _, want = term.partition("!=")
            if _field_text(_get_path(obj, path.strip())) == want.strip():
                return False
        else:
            path, _, want = term.replace("==", "=").partition("=")
            if _field_text(_get_path(obj, path.strip())) != want.strip():
                return False
    return True


def _field_text(value: Any) -> str:
    """A field's value as a field selector compares it: a boolean as the API server writes it (``spec.unschedulable=
    true``), an absent field as empty."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value or "")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge is served as this: kvpilot patches no merge-keyed lists)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 add / replace / remove / test on dict paths and list indices."""
    doc = copy.deepcopy(target)
    for op in ops:
        path = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = path[-1]
        kind = op["op"]
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(idx, op["value"])
            elif kind == "replace":
                parent[idx] = op["value"]
            elif kind == "remove":
                del parent[idx]
            elif kind == "test" and parent[idx] != op["value"]:
                raise ApiError(422, "Invalid", f"json patch test failed at {op['path']}")
        elif kind in ("add", "replace"):
            parent[last] = op["value"]
        elif kind == "remove":
            if last not in parent:
                raise ApiError(422, "Invalid", f"json patch: nothing to remove at {op['path']}")
            del parent[last]
        elif kind == "test" and parent.get(last) != op["value"]:
            raise ApiError(422, "Invalid", f"json patch test failed at {op['path']}")
    return doc


class Store:
    """Objects by (resource, namespace, name), one resourceVersion counter, and a bounded event log."""

    def __init__(self, *, max_events: int = 1000) -> None:
        self._objects: dict[tuple[ResourceType, str, str], Obj] = {}
        self._events: deque[Event] = deque(maxlen=max_events)
        self._rv = itertools.count(1)
        self._last_rv = 0
        self.changed = threading.Condition()
        self._compacted_below = 0  # watches from a resourceVersion below this get 410 Gone
        self.watch_epoch = 0  # open watches from an older epoch end with 410 Gone
        self._keys: list[tuple[str, str]] = []  # _sorted_keys' last answer, for (resourceVersion, type, namespace)
        self._keys_at: tuple[int, ResourceType, str | None] | None = None

    # -- versions ----------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._last_rv

    def _bump(self) -> int:
        self._last_rv = next(self._rv)
        return self._last_rv

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches must list again (410)."""
        with self.changed:
            self._events.clear()
            self._compacted_below = self._last_rv + 1

    def expire_watches(self) -> None:
        """End every open watch with 410 Gone, as an API server does when its watch cache is reset:
        the clients must list again."""
        with self.changed:
            self.compact()
            self.watch_epoch += 1
            self.changed.notify_all()

    def oldest_watchable(self) -> int:
        """The smallest resourceVersion a watch can start from."""
        if self._events:
            return max(self._events[0].rv - 1, self._compacted_below - 1)
        return self._compacted_below - 1 if self._compacted_below else 0

    # -- reads -------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.changed:
            obj = self._objects.get((rt, namespace if rt.namespaced else "", name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{rt.plural} "{name}" not found', name=name, kind=rt.plural)
            return copy.deepcopy(obj)

    def list(
        self, rt: ResourceType, namespace: str | None, *, label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], int]:  # fmt: skip
        """Every object of ``rt`` (in ``namespace``; None: all) the selectors match, by namespace and name, and the
        current resourceVersion."""
        items, rv, _, _ = self.list_page(rt, namespace, label_selector=label_selector, field_selector=field_selector)
        return items, rv

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], int, str | None, int | None]:
        """One page of a list, as the API server answers ``limit`` and ``continue``: (items, resourceVersion, the
        continue token when more objects follow, remainingItemCount). The token (base64 JSON, as the API server's:
        the snapshot's resourceVersion and the key to start after) answers 410 ``Expired`` once its resourceVersion is
        compacted (``compact()``, ``expire_watches()``). Simplified: the API server serves a continued page from etcd
        at the token's resourceVersion (a consistent snapshot); the fake serves the objects stored now after the key,
        stamped with the token's resourceVersion. remainingItemCount is given, as the API server gives it, only for a
        list without selectors. ``limit`` 0: every object."""
        with self.changed:
            rv, start = self._last_rv, ""
            if continue_token:
                rv, start = _read_continue(continue_token)  # "namespace/name" (a namespace has no "/")
                if rv < self._compacted_below:
                    raise ApiError(410, "Expired", CONTINUE_TOO_OLD)
            ns_after, _, name_after = start.partition("/")
            keys = self._sorted_keys(rt, namespace)
            keys = keys[bisect.bisect_right(keys, (ns_after, name_after)) :] if start else keys
            items: list[Obj] = []
            for i, (ns, name) in enumerate(keys):
                if limit and len(items) == limit:
                    token = _continue_token(rv, f"{items[-1]['metadata'].get('namespace', '')}/"
                                            f"{items[-1]['metadata']['name']}")  # fmt: skip
                    remaining = None if (label_selector or field_selector) else len(keys) - i
                    return items, rv, token, remaining
                obj = self._objects[(rt, ns, name)]
                if label_selector_matches(label_selector, obj.get("metadata", {}).get("labels")) and (
                    field_selector_matches(field_selector, obj)
                ):
                    items.append(copy.deepcopy(obj))
            return items, rv, None, None

    def _sorted_keys(self, rt: ResourceType, namespace: str | None) -> list[tuple[str, str]]:
        """(namespace, name) of ``rt``'s objects in order, kept while nothing is written (the pages of one list), so a
        page costs its own objects, as the API server's range read from etcd does, not a sort of all of them."""
        at = (self._last_rv, rt, namespace)
        if self._keys_at != at:
            self._keys = sorted(
                (ns, name) for (t, ns, name) in self._objects if t == rt and (namespace is None or ns == namespace)
            )
            self._keys_at = at
        return self._keys

    def events_since(self, rv: int) -> list[Event]:
        with self.changed:
            return [e for e in self._events if e.rv > rv]

    # -- writes ------------------------------------------------------------------------------------

    def _record(self, type_: str, rt: ResourceType, obj: Obj) -> None:
        self._events.append(Event(int(obj["metadata"]["resourceVersion"]), type_, rt, copy.deepcopy(obj)))
        self.changed.notify_all()

    def create(self, rt: ResourceType, namespace: str, obj: Obj) -> Obj:
        with self.changed:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{rt.kind}: metadata.name: Required value", kind=rt.plural)
            ns = namespace if rt.namespaced else ""
            key = (rt, ns, name)
            if key in self._objects:
                raise ApiError(409, "AlreadyExists", f'{rt.plural} "{name}" already exists', name=name, kind=rt.plural)
            if rt.namespaced:
                meta["namespace"] = ns
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["resourceVersion"] = str(self._bump())
            meta.setdefault("generation", 1)
            obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
            self._objects[key] = obj
            self._record("ADDED", rt, obj)
            return copy.deepcopy(obj)

    def replace(self, rt: ResourceType, namespace: str, name: str, obj: Obj) -> Obj:
        """PUT: a body carrying a resourceVersion other than the current one is a conflict (409)."""
        with self.changed:
            current = self.get(rt, namespace, name)
            sent = (obj.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {rt.plural} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    name=name,
                    kind=rt.plural,
                )
            return self._store_update(rt, current, copy.deepcopy(obj))

    def patch(self, rt: ResourceType, namespace: str, name: str, patch: Any, content_type: str) -> Obj:
        with self.changed:
            current = self.get(rt, namespace, name)
            updated = json_patch(current, patch) if "json-patch" in content_type else merge_patch(current, patch)
            sent = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'{rt.plural} "{name}": the object has been modified', name=name)
            return self._store_update(rt, current, updated)

    def _store_update(self, rt: ResourceType, current: Obj, updated: Obj) -> Obj:
        meta = updated.setdefault("metadata", {})
        for immutable in ("name", "namespace", "uid", "creationTimestamp"):
            if immutable in current["metadata"]:
                meta[immutable] = current["metadata"][immutable]
        if updated.get("spec") != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        meta["resourceVersion"] = str(self._bump())
        updated["kind"], updated["apiVersion"] = rt.kind, rt.api_version
        self._objects[(rt, meta.get("namespace", "") if rt.namespaced else "", meta["name"])] = updated
        self._record("MODIFIED", rt, updated)
        return copy.deepcopy(updated)

    def delete(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self.changed:
            current = self.get(rt, namespace, name)
            del self._objects[(rt, namespace if rt.namespaced else "", name)]
            current["metadata"]["resourceVersion"] = str(self._bump())
            self._record("DELETED", rt, current)
            return current

    def all(self, rt: ResourceType) -> Iterator[Obj]:
        with self.changed:
            return iter([copy.deepcopy(o) for (t, _, _), o in self._objects.items() if t == rt])
