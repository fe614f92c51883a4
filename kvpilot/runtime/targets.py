"""Static scrape targets: from the config file (pinned), plus those an operator adds or removes through the API
(stored, so they survive restarts).

Thread-safe because the API handlers run in a worker thread while the loop reads the list each tick. API changes
are written to the store first: if the store is away the change fails (503) instead of silently not persisting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from collector.clock import Clock, WallClock
from collector.discovery.static import SameReplica, same_replica
from collector.samples import TargetInfo
from store import repo
from store.db import transaction
from store.fields import TargetSpec, redact_url

log = logging.getLogger(__name__)


GONE_KEPT = 1024  # removed targets remembered for ``StaticTargets.gone``


class PinnedTarget(ValueError):
    """The target comes from the configuration file; change the file to remove it."""


class StaticTargets:
    def __init__(
        self,
        initial: Iterable[TargetInfo] = (),
        *,
        sessions: sessionmaker[Session] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._by_url: dict[str, TargetInfo] = {}
        for t in initial:
            self._by_url.setdefault(t.url, t)
        self._pinned = frozenset(self._by_url)
        self._sessions = sessions
        self._clock = clock or WallClock()
        self._generation = 0  # counts this instance's changes, so that a refresh read before one does not undo it
        self._refused: set[str] = set()
        self._accepted: dict[str, TargetInfo] = {}  # the stored targets the last read accepted
        # The targets removed (here, or by another kvpilot on the store, read by refresh), as they were held: the
        # snapshot of a tick that ran before the removal still lists them, as discovered targets, until the next.
        self._gone: dict[str, TargetInfo] = {}

    def load(self) -> int:
        """Add the targets stored by earlier runs; returns how many. A stored target that today's checks refuse
        (an older version accepted it) is left out with an error naming it, never a failed start."""
        if self._sessions is None:
            return 0
        good = self._stored()
        with self._lock:
            for t in good.values():
                self._by_url.setdefault(t.url, t)
        return len(good)

    def refresh(self) -> None:
        """Take up what other kvpilots on the same store (HA replicas, shards, a second `kvpilot run`) added or removed
        through the API: their POST and DELETE reach the one instance that served them, and the others went on without
        the target (or with it: DELETE there said 404) until restarted. The targets added through the API are made the
        stored ones, labels included (a target removed and added again with another deployment through one instance
        is scraped under the new labels by all); the configuration's stay. A change made here while the store was
        read wins until the next one."""
        if self._sessions is None:
            return
        with self._lock:
            generation = self._generation
        stored = self._stored()
        with self._lock:
            if generation != self._generation:
                return
            for url in [u for u in self._by_url if u not in self._pinned and u not in stored]:
                self._drop(url)
            for t in stored.values():
                if t.url not in self._pinned and self._by_url.get(t.url) != t:  # the one held kept: ``gone`` knows it
                    self._by_url[t.url] = t

    def _stored(self) -> dict[str, TargetInfo]:
        """The stored targets today's checks accept, by URL; one they refuse is named in the log once."""
        assert self._sessions is not None
        with transaction(self._sessions, reads_only=True) as s:
            stored = repo.list_static_targets(session=s)
        good: dict[str, TargetInfo] = {}
        for t in stored:
            if self._accepted.get(t.url) == t:  # checked at an earlier read: each tick reads them all
                good[t.url] = t
                continue
            try:
                TargetSpec(**{k: getattr(t, k) for k in TargetSpec.model_fields})
            except ValidationError as e:
                if t.url not in self._refused:
                    self._refused.add(t.url)
                    why = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
                    log.error(
                        "stored target %r skipped (remove it with DELETE /v1/targets): %s", redact_url(t.url), why
                    )
                continue
            good[t.url] = t
        self._accepted = good
        return good

    def attach(self, sessions: sessionmaker[Session], clock: Clock) -> None:
        """Persist API changes from now on (the store is built after discovery)."""
        self._sessions = sessions
        self._clock = clock

    def static_targets(self) -> list[TargetInfo]:
        with self._lock:
            return list(self._by_url.values())

    def add(self, target: TargetInfo, *, by: str = "api") -> bool:
        """False when the URL is present here or stored already (another kvpilot on the store added it: its row,
        as stored, is the one scraped here too, whatever this call's labels)."""
        with self._lock:
            if target.url in self._by_url:
                return False
            pods = {(t.namespace, t.pod): redact_url(t.url) for t in self._by_url.values() if t.kind == "engine"}
            twin = same_replica(target, pods)
            if twin is not None:
                raise SameReplica(f"pod {twin}")
            added = True
            if self._sessions is not None:
                with transaction(self._sessions) as s:
                    now = self._clock.now()
                    added = repo.add_static_target(session=s, target=target, added_by=by, now=now)
                    if added:
                        shown = redact_url(target.url)  # the audit trail is shown: never a token or password
                        repo.record_audit(session=s, at=now, actor=by, action="target.add", subject=shown,
                                          message=f"{target.kind} {target.namespace}/{target.deployment}")  # fmt: skip
                    else:
                        target = repo.get_static_target(session=s, url=target.url) or target
            self._by_url[target.url] = target
            self._generation += 1
            return added

    def remove(self, url: str, *, by: str = "api") -> bool:
        """False when the URL is neither here nor stored; a target another kvpilot on the store added is removed."""
        with self._lock:
            if url in self._pinned:
                raise PinnedTarget(f"target {redact_url(url)!r} is defined in the configuration; remove it there")
            removed = url in self._by_url
            if self._sessions is not None:
                with transaction(self._sessions) as s:
                    removed = repo.remove_static_target(session=s, url=url) or removed
                    if removed:
                        repo.record_audit(
                            session=s, at=self._clock.now(), actor=by, action="target.remove", subject=redact_url(url)
                        )
            self._drop(url)
            self._generation += 1
            return removed

    def _drop(self, url: str) -> None:
        """Under the lock: ``url``'s target is static no more; the latest ``GONE_KEPT`` removed are kept for
        ``gone``."""
        target = self._by_url.pop(url, None)
        if target is not None:
            self._gone.pop(url, None)
            self._gone[url] = target
            if len(self._gone) > GONE_KEPT:
                del self._gone[next(iter(self._gone))]

    def gone(self, target: TargetInfo) -> bool:
        """Whether ``target`` (as a snapshot lists it) is one removed since it was listed: that very target, not a
        target with its URL found by discovery."""
        return self._gone.get(target.url) is target

    async def targets(self) -> list[TargetInfo]:
        """The loop's discovery interface."""
        return self.static_targets()
