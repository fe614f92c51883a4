"""High availability: only the holder of a ``coordination.k8s.io/v1`` Lease actuates (drains, direct scaling);
every replica collects, decides and serves reads.

The protocol is client-go's leader election, through the official client: read the Lease; create it when absent;
take it when it expired, renew it when ours, each write carrying the resourceVersion just read so that two
candidates racing for an expired Lease cannot both win (the loser gets 409 and stays a follower). A leader that
cannot renew steps down once its own lease would have expired, before anyone else can take it over.

Leases travel as the API server's JSON (``Leases``: dicts, decoded with orjson), not as the official client's model
classes: building and reading those was a quarter of a Lease round's CPU, paid by every sharded instance a few times a
tick (issue 17). The official client's ``ApiClient`` still makes each request (its host, credentials with a refreshed
token, headers); where its configuration allows (no proxy, no custom socket options or SNI name), the request goes
over one kept HTTP/1.1 connection (``http.client``, TLS from the same CA, client certificate and verification
settings) instead of urllib3, which cost two thirds of a call's CPU (issue 17, session 15).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import http.client
import logging
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import orjson

from collector.clock import Clock
from collector.scrape import Sleep, sleep_unless_stopped
from kvpilot.runtime.stopping import in_daemon_thread

if TYPE_CHECKING:
    from kubernetes import client
# The client is imported where a round runs (~33 MB a process that never elects does not pay for).

log = logging.getLogger(__name__)

Lease = dict[str, Any]  # a coordination.k8s.io/v1 Lease as the API server's JSON
_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def _micro_time(t: float) -> str:
    """``t`` as a Lease's MicroTime (RFC 3339, microseconds, UTC), as client-go writes it."""
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


# A Lease's record, as client-go compares it to tell a renewal (any change) from a Lease left as it was.
def forbidden_words(namespace: str) -> str:
    """What a 403 on a Lease means and how to fix it, said once (a Lease call refused every round otherwise read as
    one warning line every ``renew_every_s`` naming no cause: no replica led, drains and direct scaling never ran)."""
    return (
        f"kvpilot's service account may not use Leases in namespace {namespace!r} (HTTP 403): no instance leads, so "
        "no drain and no direct scaling runs (KEDA's answers go on). Give it a Role granting get, list, create and "
        f"update on leases (coordination.k8s.io) in {namespace!r}, bound to it (deploy/base/rbac.yaml: Role and "
        "RoleBinding kvpilot-leader-election), or set ha.lease_namespace to the namespace whose Role grants them "
        "(unset: kvpilot's own namespace)"
    )


def renew_deadline(lease_duration_s: float, renew_every_s: float) -> float:
    """The share of its lease a holder counts on after its last accepted renewal (client-go's renewDeadline): short
    of the lease by half a renewal interval (by half the time left after one, where renewals are more than half the
    lease apart), so that one failed round does not end the lead, and a follower that placed the renewal at a
    ``renewTime`` written on a clock up to that much behind its own does not take the Lease while the holder still
    leads (``LeaseSightings``). Before, a holder counted on the whole lease, and with a follower reading often both led
    for up to the skew (2.51 s at 3 s; two instances owned one shard for up to 3.95 s: test_lease_skew_overlap.py)."""
    margin = min(renew_every_s, lease_duration_s - renew_every_s) / 2
    return 1.0 - margin / lease_duration_s if lease_duration_s > 0 and margin > 0 else 1.0


# The settings' defaults (ha.lease_duration_s 15, ha.renew_every_s 5): 12.5 s of 15.
RENEW_DEADLINE = renew_deadline(15.0, 5.0)


def wait_after_round(clock: Clock, began: float | None, every_s: float) -> float:
    """The wait after a round that began at ``began`` (the clock's ``monotonic()``; None: no round yet) so that
    rounds start ``every_s`` apart, however long each took. Waiting ``every_s`` after each round's end added the
    rounds' own time to the renewal interval: a holder whose every round succeeded in ~4 s (a read and a write of ~2 s
    each on a loaded API server, within their timeout of a third of the lease) renewed 13 s apart and, counting on
    its Lease only up to the renew deadline (12.5 s of 15), stopped leading for part of every round
    (test_lease_slow_rounds.py)."""
    return every_s if began is None else max(0.0, every_s - (clock.monotonic() - began))


_RECORD = ("holderIdentity", "renewTime", "acquireTime", "leaseDurationSeconds", "leaseTransitions")
# A renewal stamped up to this long before our previous read, yet not in what that read returned: a write in flight
# (the holder stamps renewTime before sending it), or our read's answer handled late (a busy host). It became visible
# after that read, so it counts from that read, not from this one (which is up to a list interval later).
UNSEEN_WRITE_S = 1.0


class LeaseSightings:
    """When each Lease was last renewed, on this instance's monotonic clock: another host's ``renewTime`` is its own
    clock's, so expiry cannot compare it with ours (a reader whose clock runs ahead by more than the lease would take
    it from a live holder; a dead holder whose clock ran an hour ahead would keep it for the hour).

    As client-go (``observedTime``): a renewal is a change of the Lease's record since this instance last read it,
    and the Lease expires once it has stayed unchanged for ``leaseDurationSeconds`` of local, monotonic time. The
    renewal happened between that last read and this one: where ``renewTime`` places it inside that interval (the
    clocks agree), it is taken from there, so a shard is taken as soon as its Lease allows; up to ``UNSEEN_WRITE_S``
    before the last read (the write was in flight when we read, or our read's answer was handled late), it counts from
    that last read (later than its stamp: never earlier than the holder's own count); anywhere else (clock skew, a
    step of either clock, an unreadable time) the renewal counts from this read, as client-go counts it. A Lease
    read for the first time places a ``renewTime`` within one lease period before the read; an older one counts from
    the read (client-go's wait of one lease period). A holder whose clock runs behind ours is placed too early by
    its skew (when that is less than the time between our two reads): holders stop counting on a Lease somewhat
    before it expires (``renew_deadline``), so that a skew up to that margin never has us take it while its holder
    still leads."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[tuple[Any, ...], float, float]] = {}  # name -> (record, renewed at, read at)

    def renewed_at(self, name: str, spec: dict[str, Any], duration_s: float) -> float:
        """The monotonic time the Lease ``name`` (``spec`` just read) was last renewed, as far as this instance can
        tell (see the class)."""
        now = self._clock.monotonic()
        record = tuple(str(spec.get(key)) for key in _RECORD)
        last = self._seen.get(name)
        if last is not None and last[0] == record:
            self._seen[name] = (record, last[1], now)
            return last[1]
        earliest = last[2] if last is not None else now - duration_s
        renewed = now
        try:
            written = _epoch(spec.get("renewTime"))
        except (TypeError, ValueError, OverflowError):
            written = None
        if written is not None:
            placed = now - (self._clock.now() - written)
            if earliest <= placed <= now:  # False for NaN too
                renewed = placed
            elif last is not None and earliest - UNSEEN_WRITE_S <= placed < earliest:
                renewed = earliest  # before: from this read, up to a list interval late (a takeover 4 s past the lease)
        self._seen[name] = (record, renewed, now)
        return renewed

    def keep(self, names: set[str]) -> None:
        """Forget the Leases not in ``names`` (a group's list no longer has them: members gone for good)."""
        for name in self._seen.keys() - names:
            del self._seen[name]


def _is_lease(item: object) -> bool:
    """Whether a list's item has the shape the shards read (objects where the model classes wanted objects)."""
    if not isinstance(item, dict):
        return False
    meta, spec = item.get("metadata") or {}, item.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return False
    return all(isinstance(meta.get(key) or {}, dict) for key in ("labels", "annotations"))


class Leases:
    """The four Lease calls an election makes, on the official client's ``ApiClient`` (its configuration: host,
    TLS, the kubeconfig's or the pod's credentials, a refreshed token included), with bodies and answers as JSON
    dicts. Method names and arguments are ``CoordinationV1Api``'s; errors are its ``ApiException`` (404, 409 carry
    ``status``). ``timeout_s`` bounds each call (connect and each read): a call to an API server that stopped
    answering fails, and the election's rules for a failed call apply, instead of the round hanging while the
    holder keeps acting on a Lease that expires meanwhile (the client's default: no timeout).

    The request (URL, headers, credentials) is the ``ApiClient``'s; it is sent over one kept connection of our own
    (``_KeptConnection``) unless the configuration asks for what only urllib3 does (a proxy, socket options, an SNI
    name or hostname to assert other than the host's): then through ``ApiClient.call_api``. A kept connection the
    server closed meanwhile is reopened and the request sent again once, as urllib3 does; there are no other
    retries: a failed call is a failed round, and the next round retries."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float | None = None) -> None:
        self.api_client = api_client
        self.timeout_s = timeout_s
        self._kept = _KeptConnection.for_config(api_client.configuration, timeout_s)

    def read_namespaced_lease(self, name: str, namespace: str) -> Lease:
        return self._call("GET", namespace, name)

    def list_namespaced_lease(self, namespace: str, *, label_selector: str) -> Lease:
        answer = self._call("GET", namespace, query=[("labelSelector", label_selector)])
        items = answer.get("items")
        if items is not None and not (isinstance(items, list) and all(map(_is_lease, items))):
            raise ValueError(f"Lease list in {namespace}: its items are not all Lease objects")
        return answer

    def create_namespaced_lease(self, namespace: str, body: Lease) -> Lease:
        return self._call("POST", namespace, body=body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Lease) -> Lease:
        return self._call("PUT", namespace, name, body=body)

    def _send(self, method: str, url: str, headers: dict[str, str], body: Lease | None) -> tuple[Any, bytes]:
        """One request: the answer (``status``, ``reason``, ``headers``) and its body."""
        if self._kept is not None:
            return self._kept.request(method, url, headers, orjson.dumps(body) if body is not None else None)
        response = self.api_client.call_api(method, url, headers, body, _request_timeout=self.timeout_s)
        data: bytes = response.read()  # type: ignore[no-untyped-call]
        return response, data

    def _call(
        self,
        method: str,
        namespace: str,
        name: str | None = None,
        *,
        body: Lease | None = None,
        query: list[tuple[str, str]] | None = None,
    ) -> Lease:
        from kubernetes.client.exceptions import ApiException

        path = _LEASES.format(namespace=quote(namespace, safe=""))
        if name is not None:
            path += "/" + quote(name, safe="")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        # the ApiClient's URL, headers and credentials; the body is JSON already (dicts of str, int and None)
        _, url, sent_headers, _, _ = self.api_client.param_serialize(
            method, path, query_params=query, header_params=headers, auth_settings=["BearerToken"]
        )
        response, data = self._send(method, url, sent_headers, body)
        status: int = response.status
        if not 200 <= status <= 299:
            raise ApiException.from_response(http_resp=response, body=data.decode("utf-8", "replace"), data=None)
        answer = orjson.loads(data)
        if not isinstance(answer, dict):  # the model classes refused it; a round must fail here, not read it
            raise ValueError(f"{method} {path}: the API server answered a JSON {type(answer).__name__}, not an object")
        return answer


class _KeptConnection:
    """One HTTP/1.1 connection to the API server, kept between calls (``http.client``; one call at a time). TLS as
    the official client's urllib3 pool sets it up from the same configuration: the CA file or data, the client
    certificate, ``verify_ssl``, ``assert_hostname: False``."""

    _STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.BadStatusLine)

    def __init__(self, scheme: str, host: str, port: int | None, timeout_s: float | None, context: Any) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._timeout_s = timeout_s
        self._context = context
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None

    @classmethod
    def for_config(cls, config: Any, timeout_s: float | None) -> _KeptConnection | None:
        """None where the configuration needs urllib3 (a proxy, socket options, SNI, a hostname to assert)."""
        try:
            url = urlsplit(config.host)
            port = url.port
        except (TypeError, ValueError, AttributeError):
            return None
        if url.scheme not in ("http", "https") or not url.hostname:
            return None
        if getattr(config, "proxy", None) or getattr(config, "socket_options", None) is not None:
            return None
        if getattr(config, "keep_alive", False) or getattr(config, "tls_server_name", None):
            return None
        if getattr(config, "assert_hostname", None) not in (None, True, False):
            return None
        context = None
        if url.scheme == "https":
            data = getattr(config, "ca_cert_data", None)
            context = ssl.create_default_context(cafile=getattr(config, "ssl_ca_cert", None), cadata=data)
            if getattr(config, "cert_file", None):
                context.load_cert_chain(config.cert_file, getattr(config, "key_file", None))
            if not getattr(config, "verify_ssl", True):
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif config.assert_hostname is False:
                context.check_hostname = False
        return cls(url.scheme, url.hostname, port, timeout_s, context)

    def _open(self) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout_s, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)

    def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[http.client.HTTPResponse, bytes]:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        with self._lock:
            for attempt in (0, 1):
                kept = self._conn is not None
                conn = self._conn if self._conn is not None else self._open()
                self._conn = conn
                try:
                    conn.request(method, target, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except self._STALE:
                    self._drop()
                    if kept and attempt == 0:  # closed by the server while kept: send it again on a new one
                        continue
                    raise
                except BaseException:
                    self._drop()
                    raise
                if response.will_close:
                    self._drop()
                return response, data
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _duration(spec: dict[str, Any], default_s: float) -> float:
    """A Lease's ``leaseDurationSeconds`` (``default_s`` where it is missing, zero or not a positive number)."""
    value = spec.get("leaseDurationSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return default_s
    return float(value)


class LeaseElector:
    def __init__(
        self,
        api: Leases,
        *,
        name: str,
        namespace: str,
        identity: str,
        clock: Clock,
        lease_duration_s: float = 15.0,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        sightings: LeaseSightings | None = None,
        deadline: float = RENEW_DEADLINE,
    ) -> None:
        """``sightings``: shared with whoever else reads the same Leases in this process (``ShardCoordinator``'s
        list), so that both count a renewal from the first read that saw it. ``deadline``: the share of the lease
        this instance counts on after its last accepted renewal (``renew_deadline``)."""
        self._api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._clock = clock
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = deadline * lease_duration_s
        self._leader = False
        self._renewed_at: float | None = None  # our last accepted write, on the monotonic clock
        self.round_began: float | None = None  # when our last round began, on the monotonic clock
        self.sightings = sightings or LeaseSightings(clock)
        # The Lease as our latest accepted write left it (its new resourceVersion): the next renewal can write from
        # it without reading it again (``ShardCoordinator`` between its lists). None until a write is accepted.
        self.written: Lease | None = None
        # Written on every create and take-over/renewal: shards find each other's Leases by label and the
        # holder's KEDA address in an annotation (kvpilot.runtime.shards).
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})
        # What the last round learned of the Lease (``kvpilot.runtime.service.SeesLease``): the identity of another
        # holder it read holding it unexpired, and why it could not read or write it (None: it answered).
        self.holder_seen: str | None = None
        self.lease_failure: str | None = None
        self._forbidden_said = False  # a 403 is explained once, until a call is allowed again

    @property
    def leader(self) -> bool:
        """Whether we lead now: our last round won, and its renewal is younger than the renew deadline (a round that
        hangs or fails past that leaves us following before the Lease expires and another instance may take it,
        whatever the skew between our clocks)."""
        if not self._leader or self._renewed_at is None:
            return False
        return self._clock.monotonic() - self._renewed_at < self.renew_deadline_s

    @leader.setter
    def leader(self, value: bool) -> None:
        self._leader = value

    def expired(self, now: float) -> bool:
        """Whether the Lease we last renewed is past its renew deadline by ``now`` (the clock's ``monotonic()``; False
        before any renewal): no longer counted on, as another instance may take it from then on."""
        return self._renewed_at is not None and now - self._renewed_at >= self.renew_deadline_s

    def try_acquire_or_renew(self, current: Lease | None = None) -> bool:
        """One round of the election (blocking: run it in a worker thread). Returns whether we lead now.

        ``current``: the Lease as the caller has just read it (``ShardCoordinator`` lists its whole group each
        round), which saves reading it again; the write still carries its resourceVersion, so a stale one is refused
        with 409 exactly as a stale read would be. None reads it (and creates it when absent)."""
        from kubernetes.client.exceptions import ApiException

        now, began = self._clock.now(), self._clock.monotonic()
        self.round_began = began
        self.holder_seen = self.lease_failure = None
        try:
            won = self._round(now, current)
            if won:
                self._renewed_at = began  # only a write the API server accepted extends our lease
            self._forbidden_said = False
        except ApiException as e:
            self.lease_failure = f"HTTP {e.status} {e.reason}"
            forbidden = e.status == 403
            if forbidden and not self._forbidden_said:
                log.error("lease %s/%s: %s", self.namespace, self.name, forbidden_words(self.namespace))
                self._forbidden_said = True
            won = False if e.status == 409 else self._keep_until_expiry(began, self.lease_failure, quiet=forbidden)
        except Exception as e:  # the API server is unreachable
            self.lease_failure = str(e).splitlines()[0] if str(e) else type(e).__name__
            won = self._keep_until_expiry(began, self.lease_failure)
        if won != self._leader:
            log.info("lease %s/%s: %s", self.namespace, self.name, "acquired, actuating" if won else "lost, following")
        self.leader = won
        if not won:
            self.written = None
        return won

    def _keep_until_expiry(self, now: float, why: str, *, quiet: bool = False) -> bool:
        """``quiet``: a failure already explained (a 403), logged at debug."""
        keep = self._leader and self._renewed_at is not None and now - self._renewed_at < self.renew_deadline_s
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "lease %s/%s: cannot renew (%s)%s",
            self.namespace,
            self.name,
            why,
            "; still leading until its renew deadline" if keep else "",
        )
        return keep

    def _spec(self, now: float, *, acquire_time: Any, transitions: int) -> dict[str, Any]:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
            "acquireTime": acquire_time,
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }
        return {k: v for k, v in spec.items() if v is not None}

    def _round(self, now: float, current: Lease | None) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            lease = current if current is not None else self._api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
            if self.labels:
                meta["labels"] = self.labels
            if self.annotations:
                meta["annotations"] = self.annotations
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta,
                "spec": self._spec(now, acquire_time=_micro_time(now), transitions=0),
            }
            self.written = self._api.create_namespaced_lease(self.namespace, body)
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        duration = _duration(spec, self.lease_duration_s)
        expired = self._clock.monotonic() - self.sightings.renewed_at(self.name, spec, duration) > duration
        if holder and holder != self.identity and not expired:
            self.holder_seen = str(holder)
            return False
        taking_over = holder != self.identity
        transitions = (spec.get("leaseTransitions") or 0) + (1 if taking_over else 0)
        acquire = _micro_time(now) if taking_over else spec.get("acquireTime")
        # a new object: ``current`` may be a list's item or our last write, which stay as they were read
        body = {**lease, "apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}  # a list's items come without them
        body["spec"] = self._spec(now, acquire_time=acquire, transitions=transitions)
        if self.labels or self.annotations:
            meta = dict(lease.get("metadata") or {"name": self.name, "namespace": self.namespace})
            meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
            body["metadata"] = meta
        # carries metadata.resourceVersion; the answer carries the next one
        self.written = self._api.replace_namespaced_lease(self.name, self.namespace, body)
        return True

    def release(self) -> None:
        """On shutdown: hand the Lease back so a follower takes over at once instead of after expiry."""
        if not self._leader:
            return
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            spec = lease.get("spec")
            if spec is not None and spec.get("holderIdentity") == self.identity:
                spec.pop("holderIdentity", None)
                spec.pop("renewTime", None)
                self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as e:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, e)
        self.leader = False
        self.written = None

    async def run(self, stop: asyncio.Event, *, every_s: float, sleep: Sleep = asyncio.sleep) -> None:
        """Campaign and renew every ``every_s`` (from one round's start to the next: ``wait_after_round``) until
        ``stop``; then release."""
        await campaign(
            self.try_acquire_or_renew,
            lambda: wait_after_round(self._clock, self.round_began, every_s),
            self.release,
            stop,
            sleep=sleep,
            name="lease",
        )


async def campaign(
    round_: Callable[[], object],
    wait_s: Callable[[], float],
    release: Callable[[], None],
    stop: asyncio.Event,
    *,
    sleep: Sleep,
    name: str,
) -> None:
    """``round_()``, then a wait of ``wait_s()``, until ``stop``; then ``release()``. Rounds block (HTTP to the API
    server). In real time (``sleep`` is ``asyncio.sleep``) the rounds and the waits between them run in one daemon
    thread of their own, which ``stop`` wakes at once: the event loop is not involved between rounds (a worker-thread
    hand-off and a sleep's tasks each round cost a sharded instance ~1 ms of loop CPU a tick, issue 17). A virtual
    ``sleep`` (tests, replays) keeps each round on the loop, a worker thread per round, and waits on its clock.
    An exception from a round ends the campaign with it (``spawn_guarded`` restarts it); a cancelled campaign, like
    a crash, releases nothing."""
    if sleep is not asyncio.sleep:
        while not stop.is_set():
            await asyncio.to_thread(round_)
            await sleep_unless_stopped(sleep, wait_s(), stop)
        await asyncio.to_thread(release)
        return
    halt = threading.Event()
    abandoned = False

    def rounds() -> None:
        while not halt.is_set():
            round_()
            halt.wait(wait_s())
        if not abandoned:
            release()

    done: asyncio.Future[None] = in_daemon_thread(rounds, name=name)
    stopper: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([done, stopper], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        abandoned = True
        raise
    finally:
        halt.set()
        stopper.cancel()
    await done
