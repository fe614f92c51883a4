"""Sharding: the fleet's deployments partitioned across kvpilot instances, one ``coordination.k8s.io/v1`` Lease per
shard, so that a shard moves to a surviving instance when its holder dies.

Two stable hashes. A deployment belongs to the shard with the highest rendezvous (HRW) score of
``(deployment, shard)``: changing the number of shards from S to S+1 moves only the ~1/(S+1) of deployments that
now score highest on the new shard. A shard goes to the live instance with the highest HRW score of
``(instance, shard)`` among those under their fair share ``ceil(S / instances)`` (bounded-load rendezvous), and
stays with its holder while that holder lives and is not over its share: an instance dying moves only its own
shards, one joining takes over only what the others hold beyond their share.

Who is alive: every instance holds a member Lease of its own (``<lease_name>-member-<identity>``); one list by label
per round reads every member and shard Lease. Each shard Lease (``<lease_name>-shard-<i>``) is taken and renewed by
``kvpilot.runtime.lease.LeaseElector`` (client-go's protocol: every write carries the resourceVersion just read, so two
instances racing for a shard cannot both win) and carries its holder's KEDA gRPC address in an annotation, which
the KEDA servicer forwards calls to (``scaler.keda.forward``). A survivor wakes just after the earliest expiry it
has read, so a dead instance's shard is taken over one lease period after its last renewal plus at most one round.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any, Protocol, runtime_checkable

from collector.clock import Clock
from collector.samples import TargetInfo
from collector.scrape import CollectResult, ScrapeResult, Sleep
from collector.urls import page_name
from kvpilot.runtime.lease import (
    RENEW_DEADLINE,
    Lease,
    LeaseElector,
    Leases,
    LeaseSightings,
    _duration,
    campaign,
    forbidden_words,
    wait_after_round,
)
from kvpilot.runtime.loop import Aggregates
from kvpilot.runtime.stopping import in_daemon_thread
from kvpilot.runtime.taken_answers import StoredAnswers
from scaler.decision import Decision

log = logging.getLogger(__name__)

GROUP_LABEL = "kvpilot.io/lease-group"
ROLE_LABEL = "kvpilot.io/lease-role"
SHARD_LABEL = "kvpilot.io/shard"
ADDRESS_ANNOTATION = "kvpilot.io/grpc-address"
# Until when the newest stored decisions of a shard's deployments were still in force, as its holder's store writer
# committed them (``kvpilot.runtime.persist.StoredThrough``; epoch seconds on the holder's clock): the instance that
# takes the shard over answers KEDA from those rows, judged by this time rather than the rows' own
IN_FORCE_ANNOTATION = "kvpilot.io/decisions-in-force-at"
WAKE_AFTER_EXPIRY_S = 0.05  # a foreign Lease is read as expired once strictly past its duration
_DUE_SLACK_S = 1e-3  # a round woken for a list due at t (``next_wake_s``) may see the clock a hair before t


def _score(*parts: str) -> int:
    return int.from_bytes(hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest(), "big")


@lru_cache(maxsize=1 << 17)
def shard_of(deployment: str, shards: int) -> int:
    """The shard of ``deployment`` ("namespace/name") among ``shards``: rendezvous hashing, stable across
    processes and versions (blake2b, not Python's salted ``hash``)."""
    if shards < 1:
        raise ValueError(f"sharding.shards must be >= 1, got {shards}")
    return max(range(shards), key=lambda i: _score(deployment, str(i)))


def assign(shards: int, members: Iterable[str], held: dict[int, str]) -> dict[int, str]:
    """Who should hold each shard, given the live ``members`` and who holds what now (``held``: shard -> live
    holder). Holders keep their shards up to the fair share ``ceil(shards / members)`` (those beyond it, the ones
    they score lowest on, are given up); every other shard goes to the highest-scoring member still under its
    share. Pure and deterministic: every instance computes the same answer from the same Leases."""
    live = sorted(set(members))
    if not live:
        return {}
    cap = math.ceil(shards / len(live))
    result: dict[int, str] = {}
    kept: dict[str, list[int]] = {}
    for shard, holder in held.items():
        if holder in live and 0 <= shard < shards:
            kept.setdefault(holder, []).append(shard)
    for holder, mine in kept.items():
        mine.sort(key=lambda s: _score(holder, f"shard-{s}"), reverse=True)
        for s in mine[:cap]:
            result[s] = holder
    load = {m: sum(1 for h in result.values() if h == m) for m in live}
    for s in range(shards):
        if s in result:
            continue
        under = [m for m in live if load[m] < cap]
        best = max(under, key=lambda m: _score(m, f"shard-{s}"))
        result[s] = best
        load[best] += 1
    return result


def _dns_label(identity: str) -> str:
    """``identity`` as a Lease-name-safe suffix (pod names already are; anything else is cleaned and hashed)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", identity.lower()).strip("-")
    if clean == identity and len(clean) <= 40:
        return clean
    return f"{clean[:30].strip('-')}-{hashlib.blake2b(identity.encode(), digest_size=4).hexdigest()}"


@dataclass(frozen=True, slots=True)
class Route:
    """Where calls for a deployment are answered: here (``local``), or by ``owner`` at ``address``; owner None
    while its shard has no live holder (between an instance's death and the takeover)."""

    shard: int
    local: bool
    owner: str | None = None
    address: str | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """The shards an instance held at one moment: one tick's queries and its cut agree on what is ours even when a
    Lease round changes ``ShardCoordinator.owned`` in between."""

    shards: int
    owned: frozenset[int]

    def owns(self, deployment: str) -> bool:
        return shard_of(deployment, self.shards) in self.owned


@dataclass(frozen=True, slots=True)
class _Seen:
    holder: str | None
    expires_at: float
    address: str | None


class ShardCoordinator:
    """One instance's side of sharding: its member Lease, the shard Leases it holds, and what it read of the
    others'. ``owns(deployment)`` is the control loop's filter; ``route(deployment)`` the KEDA servicer's.
    Has the ``leader``/``run`` shape of ``LeaseElector``, so ``Service`` runs it as its lease task."""

    def __init__(
        self,
        api: Leases,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        address: str,
        shards: int,
        clock: Clock,
        lease_duration_s: float = 15.0,
        deadline: float = RENEW_DEADLINE,
    ) -> None:
        """``deadline``: the share of a lease counted on after its last renewal (``kvpilot.runtime.lease``)."""
        if shards < 1:
            raise ValueError(f"sharding.shards must be >= 1, got {shards}")
        self._api = api
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.shards = shards
        self._clock = clock  # expiries and due times on its monotonic reading (``LeaseSightings``)
        self.lease_duration_s = lease_duration_s
        self._sightings = LeaseSightings(clock)  # shared by the list and the electors: one reading per renewal
        group = {GROUP_LABEL: lease_name}
        self._member = LeaseElector(
            api,
            name=f"{lease_name}-member-{_dns_label(identity)}",
            namespace=namespace,
            identity=identity,
            clock=clock,
            lease_duration_s=lease_duration_s,
            labels={**group, ROLE_LABEL: "member"},
            sightings=self._sightings,
            deadline=deadline,
        )
        self._electors = [
            LeaseElector(
                api,
                name=f"{lease_name}-shard-{i}",
                namespace=namespace,
                identity=identity,
                clock=clock,
                lease_duration_s=lease_duration_s,
                labels={**group, ROLE_LABEL: "shard", SHARD_LABEL: str(i)},
                sightings=self._sightings,
                deadline=deadline,
            )
            for i in range(shards)
        ]
        self.address = address
        self._owned: frozenset[int] = frozenset()
        self._seen: dict[int, _Seen] = {}
        # The group's Leases as this round's list read them, by name: renewals write from these (with their
        # resourceVersion) instead of reading each Lease again. Empty when the list failed: each one reads its own.
        self._listed: dict[str, Lease] = {}
        self._listed_ok = False
        self._forbidden_said = False  # a list refused 403 is explained once, until one is allowed
        self._members_before: frozenset[str] = frozenset()
        # Whether the last list found nothing to settle (then the next one waits until ``_list_due_at``).
        self._settled = False
        self._list_due_at = float("-inf")
        self.rounds = 0
        self._round_began: float | None = None  # when the last round began, on the monotonic clock
        # Why this round's list or one of its Lease writes failed (``lease_failure``; None: the API server answered).
        self._failure: str | None = None
        # Called in the round's thread with the shards it took, before they count as held (``owned``, ``route``):
        # ``kvpilot.runtime.taken_answers.StoredAnswers.read_taken``, so KEDA's first call for them has an answer.
        self.on_gain: Callable[[frozenset[int]], None] | None = None
        # Shard -> until when its deployments' stored decisions are known in force (``StoredThrough.by_shard``),
        # written on the shard's Lease at each renewal; a shard without one keeps what its Lease says (a holder
        # before this one, whose rows are still the newest).
        self.in_force: Callable[[], Mapping[int, float]] | None = None

    @property
    def address(self) -> str:
        return self._address

    @address.setter
    def address(self, value: str) -> None:
        """Where other instances forward KEDA calls for this one's deployments (set once the port is bound)."""
        self._address = value
        for e in self._electors:
            e.annotations[ADDRESS_ANNOTATION] = value

    @property
    def owned(self) -> frozenset[int]:
        """The shards held: those the last round held whose renewal is still younger than the lease (a round that
        hangs past it gives them up as their Leases expire, when other instances may take them)."""
        owned = self._owned
        if owned:
            now = self._clock.monotonic()
            if any(self._electors[i].expired(now) for i in owned):
                return frozenset(i for i in owned if not self._electors[i].expired(now))
        return owned

    @owned.setter
    def owned(self, value: frozenset[int]) -> None:
        self._owned = value

    @property
    def leader(self) -> bool:
        """Holds at least one shard: actuates (direct scaling, drains) for the deployments of its shards."""
        return bool(self.owned)

    def owns(self, deployment: str) -> bool:
        return shard_of(deployment, self.shards) in self.owned

    def shard(self, deployment: str) -> int:
        return shard_of(deployment, self.shards)

    def held(self) -> Held:
        return Held(self.shards, self.owned)

    def route(self, deployment: str) -> Route:
        shard = shard_of(deployment, self.shards)
        if shard in self.owned:
            return Route(shard, local=True, owner=self.identity, address=self.address)
        seen = self._seen.get(shard)
        if seen is None or seen.holder is None or seen.expires_at < self._clock.monotonic():
            return Route(shard, local=False)
        return Route(shard, local=False, owner=seen.holder, address=seen.address)

    @property
    def holder_seen(self) -> str | None:
        """Another instance read holding a shard unexpired (``kvpilot.runtime.service.SeesLease``): an instance that
        holds no shard because the others hold them all is told that another holds them, not to check its RBAC."""
        now = self._clock.monotonic()
        others = sorted(
            s.holder for s in self._seen.values() if s.holder not in (None, self.identity) and s.expires_at >= now
        )
        return others[0] if others else None

    @property
    def lease_failure(self) -> str | None:
        """Why the last round could not list the group's Leases or write one of them (None: the API server
        answered every call; ``kvpilot.runtime.service.SeesLease``)."""
        return self._failure

    def holders(self) -> dict[int, str | None]:
        """Shard -> holder as last read (this instance's own shards included)."""
        now = self._clock.monotonic()
        out: dict[int, str | None] = {i: None for i in range(self.shards)}
        for i, seen in self._seen.items():
            if seen.holder is not None and seen.expires_at >= now:
                out[i] = seen.holder
        for i in self.owned:
            out[i] = self.identity
        return out

    # -- one round (blocking: run it in a worker thread) ----------------------------------------------------------

    def round(self) -> frozenset[int]:
        """Read the group's Leases when due, renew, give up or take shards; returns those held.

        The group is listed when the last list left something to settle (a member came or went, a shard without a
        live holder or not where the assignment puts it, a write refused), just after the earliest foreign Lease
        it read would expire, and at least every half lease period (a joining instance is seen within it). Between
        lists only the shards held are renewed, each from the Lease its previous write returned (a Lease changed
        since answers 409 and is given up, as after a list). A holder's shard Leases say it is alive, so its member
        Lease is renewed only while it holds none."""
        now = self._clock.monotonic()
        held_before = self.owned
        self._round_began = now
        self.rounds += 1
        self._failure = None
        listing = not self._settled or now >= self._list_due_at - _DUE_SLACK_S
        members = self._read(now) if listing else set(self._members_before)
        members.add(self.identity)
        held = {i: s.holder for i, s in self._seen.items() if s.holder is not None and s.expires_at >= now}
        for i, e in enumerate(self._electors):
            if e.leader:
                held[i] = self.identity
        wanted = assign(self.shards, members, held)
        self._annotate_in_force(held_before)
        # The first round only says who we are: instances starting together see each other before any takes a
        # shard, instead of the first one taking all and handing them out again.
        joining = self.rounds == 1
        refused = False
        for i, e in enumerate(self._electors):
            target = wanted.get(i)
            # a shard goes only to a member seen in the previous round too: one that flickers in for a single
            # round does not make the others shed shards
            if e.leader and target != self.identity and target in self._members_before:
                log.info("shard %d: handing over to %s (its fair share)", i, target)
                e.release()
            elif e.leader or (not joining and target == self.identity and held.get(i) in (None, self.identity)):
                was = e.leader
                refused |= not e.try_acquire_or_renew(self._current(e, listing)) and was
                self._failure = self._failure or e.lease_failure
        if joining or not any(e.leader for e in self._electors):
            self._member.try_acquire_or_renew(self._current(self._member, listing))
            self._failure = self._failure or self._member.lease_failure
        before, self._members_before = self._members_before, frozenset(members)
        owned = frozenset(i for i, e in enumerate(self._electors) if e.leader)
        # against what counted as held when the round began (``owned``: a shard past its renew deadline did not, and
        # the loop let it go), not what the last round left: a round that hung that long and renewed takes them anew
        gained = owned - held_before
        if gained and self.on_gain is not None:
            try:
                self.on_gain(gained)
            except Exception:  # what the hook prepares is a courtesy to KEDA: the shards are held all the same
                log.exception("shards %s taken: preparing their answers failed", sorted(gained))
        if owned != self.owned:
            log.info("shards held by %s: %s", self.identity, sorted(owned) or "none")
        self.owned = owned
        if listing:  # settled: the same members as the list before, every shard held where the assignment puts it
            after = {i: self.identity if i in owned else (h if h != self.identity else None) for i, h in held.items()}
            same = self._members_before == before
            self._settled = self._listed_ok and same and all(after.get(i) == wanted.get(i) for i in wanted)
        if refused:
            self._settled = False
        return owned

    def _annotate_in_force(self, held: frozenset[int]) -> None:
        """Our time for each shard held (on its next write); a shard being taken carries its last holder's."""
        try:
            in_force = self.in_force() if self.in_force is not None else {}
        except Exception:  # a courtesy to the next holder: the Leases are renewed all the same
            log.exception("shards: the stored decisions' time not read")
            in_force = {}
        for i, e in enumerate(self._electors):
            at = in_force.get(i) if i in held else None
            if at is None:
                e.annotations.pop(IN_FORCE_ANNOTATION, None)
            else:
                e.annotations[IN_FORCE_ANNOTATION] = f"{at:.3f}"

    def in_force_at(self, shard: int) -> float | None:
        """Until when the stored decisions of ``shard``'s deployments were in force, as its Lease said when this
        instance last wrote it (read right after a take: its last holder's word); None if it says nothing usable."""
        written = self._electors[shard].written if 0 <= shard < self.shards else None
        value = ((written or {}).get("metadata") or {}).get("annotations") or {}
        try:
            at = float(value.get(IN_FORCE_ANNOTATION, "nan"))
        except (TypeError, ValueError):
            return None
        return at if math.isfinite(at) else None

    def _current(self, elector: LeaseElector, listing: bool) -> Lease | None:
        """The Lease to write from: as this round's list read it, else as our own last write left it (None: the
        elector reads it, and creates it when absent)."""
        if listing and self._listed_ok:
            return self._listed.get(elector.name)
        return elector.written if elector.leader else None

    def _read(self, now: float) -> set[str]:
        """Every member and shard Lease of the group, in one list; returns the live members (the holders of member
        Leases and of shard Leases) and sets when the next list is due."""
        self._listed = {}
        self._listed_ok = False
        try:
            leases = self._api.list_namespaced_lease(self.namespace, label_selector=f"{GROUP_LABEL}={self.lease_name}")
        except Exception as e:  # the API server is away: keep what was read, renewals decide what we keep
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            status = getattr(e, "status", None)  # an ApiException: said as LeaseElector says it
            if status == 403 and not self._forbidden_said:  # said once, with the fix, until a list is allowed
                log.error("shards: cannot list Leases: %s", forbidden_words(self.namespace))
            elif status != 403:
                log.warning("shards: cannot list Leases (%s); keeping the last view", why)
            self._forbidden_said = status == 403
            self._failure = f"HTTP {status} {getattr(e, 'reason', '')}".rstrip() if isinstance(status, int) else why
            return set(self._members_before)
        self._listed_ok = True
        self._forbidden_said = False
        members: set[str] = set()
        seen: dict[int, _Seen] = {}
        due = now + self.lease_duration_s / 2
        for lease in leases.get("items") or ():
            meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            if meta.get("name"):
                self._listed[meta["name"]] = lease
            labels = meta.get("labels") or {}
            holder = spec.get("holderIdentity")
            duration = _duration(spec, self.lease_duration_s)
            expires = self._sightings.renewed_at(str(meta.get("name")), spec, duration) + duration
            live = holder is not None and expires >= now
            if live and holder != self.identity:
                due = min(due, expires + WAKE_AFTER_EXPIRY_S)
            if labels.get(ROLE_LABEL) == "member":
                if live and holder is not None:
                    members.add(holder)
            elif labels.get(ROLE_LABEL) == "shard":
                try:
                    index = int(labels.get(SHARD_LABEL, ""))
                except ValueError:
                    continue
                if live and holder is not None:
                    members.add(holder)
                address = (meta.get("annotations") or {}).get(ADDRESS_ANNOTATION)
                seen[index] = _Seen(holder if live else None, expires, address)
        self._seen = seen
        self._list_due_at = due
        self._sightings.keep({*self._listed, *(e.name for e in self._electors), self._member.name})
        return members

    def next_wake_s(self, every_s: float) -> float:
        """Seconds to the next round: ``every_s``, or sooner, just after the earliest foreign shard Lease expires
        (so a dead instance's shard is taken one lease period after its last renewal, not a round later)."""
        now = self._clock.monotonic()
        expiries = [
            s.expires_at + WAKE_AFTER_EXPIRY_S
            for i, s in self._seen.items()
            if s.holder is not None and i not in self.owned and s.expires_at + WAKE_AFTER_EXPIRY_S > now
        ]
        return min([every_s, *(t - now for t in expiries)])

    def release(self) -> None:
        """On shutdown: every held shard and the membership handed back at once (no waiting for expiry)."""
        for e in self._electors:
            e.release()
        self._member.release()
        self.owned = frozenset()

    async def run(self, stop: asyncio.Event, *, every_s: float, sleep: Sleep = asyncio.sleep) -> None:
        """Rounds until ``stop``, then release (``kvpilot.runtime.lease.campaign``: in real time, in a thread of
        their own). A crash (SIGKILL, a cancelled task) releases nothing: the others take the shards over when their
        Leases expire."""

        def wait_s() -> float:  # rounds every ``every_s`` from one's start to the next (``wait_after_round``)
            return self.next_wake_s(wait_after_round(self._clock, self._round_began, every_s))

        await campaign(self.round, wait_s, self.release, stop, sleep=sleep, name="shards")


# -- the control loop's side: only the deployments of held shards are scraped, decided and actuated --------------


class Takeover:
    """The deployments the control loop decides (``owns``): those of the shards held, each from the tick after the
    decisions stored for its deployments were read (``take``, at the start of every tick).

    What kvpilot raised the planner's count by (a rollout's surge, ``scaler.own_raise``) is remembered in RAM: the
    instance that takes a shard over (its holder died, or handed it over) read the count the scale source reports,
    the old holder's planner count plus its surge, as the planner's own; a hold kept it and the rollout stage added
    the surge once more (`test_shards_rollout`: 8 instead of 6 to the end of the rollout, 6 instead of 4 after it).
    The stored decisions record the planner's count under their raise, so the new holder resumes from them, as a
    restarted instance does (``ControlLoop.resume``). A restarted sharded instance holds no shard at its first tick
    and forgot what it resumed at start: it reads them again the same way when it takes its shards.

    The shards ``take`` found are the tick's whole view of what is ours (``owns``, ``held``: discovery, the collect
    cut, the scale read, the decisions), until the next tick's ``take``. The Lease rounds run in a thread of their
    own and change ``ShardCoordinator.owned`` at any moment of a tick: a shard taken after the tick's start but
    read live by its discovery was scraped and decided before its stored decisions were read, without the count the
    scale source reports (not asked: not ours yet), and the planner's count went out without the surge
    (`test_shards_rollout`, ``LateRound``: 4 for one tick mid-rollout, then 6).

    ``resumes`` (``kvpilot.runtime.wiring``): what else a restart restores, for the shards taken (the GPUs the open
    ``vanished`` findings name, each deployment's learned capacity): a blocking store read, given whether a key
    (deployment or ``node/<name>``) is of a shard taken, that returns what to apply in the loop."""

    def __init__(
        self,
        shards: ShardCoordinator,
        stored: Callable[[], Mapping[str, Decision]],
        *,
        timeout_s: float,
        resumes: Callable[[Callable[[str], bool]], Callable[[], object]] | None = None,
    ) -> None:
        self._shards = shards
        self._stored = stored  # the newest stored decision of every deployment (a blocking store read)
        self.resumes = resumes
        self.timeout_s = timeout_s
        self._ready: frozenset[int] = frozenset()  # the shards held at this tick's start, their stored decisions read
        # KEDA's answers for a shard taken before its first tick (``kvpilot.runtime.wiring``): told which shards a
        # whole tick has decided since, whose answers the board now gives
        self.answers: StoredAnswers | None = None

    def owns(self, deployment: str) -> bool:
        return shard_of(deployment, self._shards.shards) in self._ready

    def held(self) -> Held:
        """The shards of this tick (``OwnedTargets``, ``OwnedCollect``): those held at its start."""
        return Held(self._shards.shards, self._ready)

    async def take(self) -> list[Decision]:
        """The stored decisions of the deployments of the shards taken since the last call; from now they are
        ours (``owns``). A store that fails or does not answer within ``timeout_s`` gives none: the shards are
        decided anyway, a surge then possibly added once more, as before."""
        owned = self._shards.owned
        gained = owned - self._ready
        if self.answers is not None:  # the last take's shards have been decided by the tick that took them
            self.answers.decided(self._ready)
        taken: list[Decision] = []
        if gained:
            n = self._shards.shards
            ours = partial(_of_shards, shards=n, gained=gained)

            def read() -> tuple[Mapping[str, Decision], Callable[[], object] | None]:
                return self._stored(), (self.resumes(ours) if self.resumes is not None else None)

            try:
                stored, resume = await asyncio.wait_for(in_daemon_thread(read, name="store-call"), self.timeout_s)
            except Exception as e:  # a store outage must not keep the shard from being decided
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                log.error("shards %s taken: stored decisions not read (%s); deciding without them", sorted(gained), why)
            else:
                taken = [d for key, d in stored.items() if ours(key)]
                if resume is not None:
                    resume()
        self._ready = owned
        return taken


def _of_shards(key: str, *, shards: int, gained: frozenset[int]) -> bool:
    return shard_of(key, shards) in gained


class HoldsShards(Protocol):
    """Which shards are this instance's now: ``Takeover`` (the control loop's, fixed for a tick) or a
    ``ShardCoordinator`` (as its last Lease round left them)."""

    def held(self) -> Held: ...


class OwnedTargets:
    """Discovery filtered to this instance's deployments before anything is scraped. A GPU page belongs to every
    instance with a replica on its node (the GPU join is per node); one on a node without any engine target
    goes to the shard its node (or URL) hashes to, so every GPU page is read by some instance."""

    def __init__(self, discovery: Any, shards: HoldsShards) -> None:
        self._discovery = discovery
        self._shards = shards

    async def targets(self) -> list[TargetInfo]:
        return owned_targets(await self._discovery.targets(), self._shards.held())


def owned_targets(targets: Sequence[TargetInfo], shards: ShardCoordinator | Held) -> list[TargetInfo]:
    engines = [t for t in targets if t.kind != "gpu"]
    all_nodes = {t.node for t in engines if t.node}
    mine = [t for t in engines if shards.owns(t.deployment_key)]
    my_nodes = {t.node for t in mine if t.node}
    gpus = [t for t in targets if t.kind == "gpu" and _gpu_is_mine(t, my_nodes, all_nodes, shards)]
    return [*mine, *gpus]


def _gpu_is_mine(t: TargetInfo, my_nodes: set[str], all_nodes: set[str], shards: ShardCoordinator | Held) -> bool:
    if t.node and t.node in my_nodes:
        return True
    # a page on no node goes by its URL as its down finding names it (password redacted), so its keeper closes it
    return t.node not in all_nodes and shard_of(f"node/{t.node or page_name(t.url)}", shards.shards) in shards.owned


@runtime_checkable
class CollectsOwned(Protocol):
    """A collect stage that narrows its own reads to a shard's deployments (``collector.discovery.promql.PromQLSource``:
    label matchers in its queries); any other is collected whole and filtered here."""

    async def collect_owned(self, owns: Callable[[str], bool], targets: Sequence[TargetInfo] = ()) -> CollectResult: ...


class OwnedCollect:
    """A collect stage whose source reads the fleet from Prometheus (it ignores the targets it is given). Where the
    source can narrow its queries (``collect_owned``: the PromQL source adds label matchers of the deployments of
    the shards held when the tick starts), Prometheus sends only ours, and a shard taken over is read from the next
    tick; else the whole fleet is read. Either way the results are cut here to the deployments of the same shards,
    and GPUs to the nodes of their replicas (a narrowed answer holds no other instance's replicas, so a faulty GPU
    on a node shared with one may also be kept by the instance its node hashes to: seen twice, never missed)."""

    def __init__(self, collector: Any, shards: HoldsShards) -> None:
        self._collector = collector
        self._shards = shards
        self._held = shards.held()

    async def collect_once(self, targets: Sequence[TargetInfo]) -> CollectResult:
        held = self._held = self._shards.held()
        result: CollectResult = await (
            self._collector.collect_owned(held.owns, targets)
            if isinstance(self._collector, CollectsOwned)
            else self._collector.collect_once(targets)
        )
        owns = held.owns
        engines: list[ScrapeResult] = []
        all_nodes: set[str] = set()
        for r in result.results:
            if r.target.kind == "gpu":
                continue
            # a replica without a node names none: a GPU page without one goes by its URL's hash (as in owned_targets)
            all_nodes |= {s.node for s in r.replicas if s.node} | ({r.target.node} if r.target.node else set())
            mine = tuple(s for s in r.replicas if owns(s.deployment_key))
            if mine or (not r.replicas and owns(r.target.deployment_key)):
                engines.append(r if len(mine) == len(r.replicas) else replace(r, replicas=mine))
        my_nodes = {s.node for r in engines for s in r.replicas} | {r.target.node for r in engines}
        gpus = [
            r for r in result.results if r.target.kind == "gpu" and _gpu_is_mine(r.target, my_nodes, all_nodes, held)
        ]
        results = (*engines, *gpus)
        keep = {r.target.url for r in results}
        health = {url: h for url, h in result.health.items() if url in keep}
        # replace(): a source's own kind of result (PromQL aggregates: no GPU page answered whole) stays that kind
        return replace(result, results=results, health=health)

    @property
    def last_aggregates(self) -> list[Any]:
        """The PromQL source's per-deployment aggregates (its ``aggregates`` mode), ours only (as of the last tick)."""
        every = self._collector.last_aggregates if isinstance(self._collector, Aggregates) else ()
        return [a for a in every if self._held.owns(f"{a.namespace}/{a.deployment}")]

    def __getattr__(self, name: str) -> Any:  # targets(), aclose(), health: the wrapped source's
        return getattr(self._collector, name)
