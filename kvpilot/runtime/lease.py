"""High availability: only the holder of a ``coordination.k8s.io/v1`` Lease actuates (drains, direct scaling);
every replica collects, decides and serves reads.

The protocol is client-go's leader election, through the official client: read the Lease; create it when absent;
take it when it expired, renew it when ours, each write carrying the resourceVersion just read so that two
candidates racing for an expired Lease cannot both win (the loser gets 409 and stays a follower). A leader that
cannot renew steps down once its own lease would have expired, before anyone else can take it over.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from collector.clock import Clock
from collector.scrape import Sleep, sleep_unless_stopped

if TYPE_CHECKING:
    from kubernetes import client
# The client is imported where a round runs (~33 MB a process that never elects does not pay for).

log = logging.getLogger(__name__)


def _micro_time(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC)


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class LeaseElector:
    def __init__(
        self,
        api: client.CoordinationV1Api,
        *,
        name: str,
        namespace: str,
        identity: str,
        clock: Clock,
        lease_duration_s: float = 15.0,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self._api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._clock = clock
        self.lease_duration_s = lease_duration_s
        self.leader = False
        self._renewed_at: float | None = None
        # The Lease as our latest accepted write left it (its new resourceVersion): the next renewal can write from
        # it without reading it again (``ShardCoordinator`` between its lists). None until a write is accepted.
        self.written: client.V1Lease | None = None
        # Written on every create and take-over/renewal: shards find each other's Leases by label and the
        # holder's KEDA address in an annotation (kvpilot.runtime.shards).
        self.labels = dict(labels or {})
        self.annotations = dict(annotations or {})

    def try_acquire_or_renew(self, current: client.V1Lease | None = None) -> bool:
        """One round of the election (blocking: run it in a worker thread). Returns whether we lead now.

        ``current``: the Lease as the caller has just read it (``ShardCoordinator`` lists its whole group each
        round), which saves reading it again; the write still carries its resourceVersion, so a stale one is refused
        with 409 exactly as a stale read would be. None reads it (and creates it when absent)."""
        from kubernetes.client.exceptions import ApiException

        now = self._clock.now()
        try:
            won = self._round(now, current)
            if won:
                self._renewed_at = now  # only a write the API server accepted extends our lease
        except ApiException as e:
            won = False if e.status == 409 else self._keep_until_expiry(now, f"HTTP {e.status} {e.reason}")
        except Exception as e:  # the API server is unreachable
            won = self._keep_until_expiry(now, str(e).splitlines()[0] if str(e) else type(e).__name__)
        if won != self.leader:
            log.info("lease %s/%s: %s", self.namespace, self.name, "acquired, actuating" if won else "lost, following")
        self.leader = won
        if not won:
            self.written = None
        return won

    def _keep_until_expiry(self, now: float, why: str) -> bool:
        keep = self.leader and self._renewed_at is not None and now - self._renewed_at < self.lease_duration_s
        log.warning(
            "lease %s/%s: cannot renew (%s)%s",
            self.namespace,
            self.name,
            why,
            "; still leading until the lease expires" if keep else "",
        )
        return keep

    def _spec(self, now: float, *, acquire_time: Any, transitions: int) -> client.V1LeaseSpec:
        from kubernetes import client

        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.lease_duration_s)),
            acquire_time=acquire_time,
            renew_time=_micro_time(now),
            lease_transitions=transitions,
        )

    def _round(self, now: float, current: client.V1Lease | None) -> bool:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            lease = current if current is not None else self._api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(
                    name=self.name,
                    namespace=self.namespace,
                    labels=self.labels or None,
                    annotations=self.annotations or None,
                ),
                spec=self._spec(now, acquire_time=_micro_time(now), transitions=0),
            )
            self.written = self._api.create_namespaced_lease(self.namespace, body)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity
        renewed = _epoch(spec.renew_time)
        duration = spec.lease_duration_seconds or self.lease_duration_s
        expired = renewed is None or now - renewed > duration
        if holder and holder != self.identity and not expired:
            return False
        taking_over = holder != self.identity
        transitions = (spec.lease_transitions or 0) + (1 if taking_over else 0)
        acquire = _micro_time(now) if taking_over else spec.acquire_time
        lease.spec = self._spec(now, acquire_time=acquire, transitions=transitions)
        if self.labels or self.annotations:
            meta = lease.metadata or client.V1ObjectMeta(name=self.name, namespace=self.namespace)
            meta.labels = {**(meta.labels or {}), **self.labels}
            meta.annotations = {**(meta.annotations or {}), **self.annotations}
            lease.metadata = meta
        lease.api_version, lease.kind = "coordination.k8s.io/v1", "Lease"  # a list's items come without them
        # carries metadata.resourceVersion; the answer carries the next one
        self.written = self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        return True

    def release(self) -> None:
        """On shutdown: hand the Lease back so a follower takes over at once instead of after expiry."""
        if not self.leader:
            return
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as e:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, e)
        self.leader = False
        self.written = None

    async def run(self, stop: asyncio.Event, *, every_s: float, sleep: Sleep = asyncio.sleep) -> None:
        """Campaign and renew every ``every_s`` until ``stop``; then release."""
        while not stop.is_set():
            await asyncio.to_thread(self.try_acquire_or_renew)
            await sleep_unless_stopped(sleep, every_s, stop)
        await asyncio.to_thread(self.release)
