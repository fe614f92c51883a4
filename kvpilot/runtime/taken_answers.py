"""KEDA's answers for a shard just taken over, before this instance's tick decides it (issue 17, sharding).

From the moment a Lease round takes a shard, KEDA's calls for its deployments are answered here (``route``: local),
but the control loop decides them only from its next tick (``kvpilot.runtime.shards.Takeover``), up to one interval
later. The board had no decision for them meanwhile: KEDA got ``NOT_FOUND``, which it counts as a failed call
(``fallback.failureThreshold`` of them in a row and the ScaledObject goes to its fallback replicas). Now the round
that takes a shard reads the decisions its previous holder stored (the rows the tick resumes from: the last
published count, the rollout raise included) before the shard counts as held, and those are answered for its
deployments until the tick publishes its own. Only for a shard held at the moment of the call; a stored decision
older than the staleness limit is refused as the board's would be (``UNAVAILABLE``: ``DecisionReader``).

A row's age is not its own time: an unchanged decision is stored again only once a minute (the loop's
``decision_heartbeat_s``), so a steady deployment's row was often past the 30 s limit at a takeover, and KEDA got
``UNAVAILABLE`` until the tick. The old holder wrote on the shard's Lease, at each renewal, until when its store had
committed the decisions in force for every deployment of the shard (``IN_FORCE_ANNOTATION``:
``kvpilot.runtime.persist.StoredThrough``, the time of its last tick whose writes the store took); its row says the
decision in force at that time, and the age counts from there (``Published.current_at``). That time stops with the
old holder's loop or its store, whatever its Lease rounds do, so a holder that stopped deciding is not vouched for; a
row older than that time by a heartbeat or more was not stored again by a holder deciding it (a deleted deployment,
an older holder's) and keeps its own time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

from scaler.decision import Decision
from scaler.publish import DecisionSource, Published
from store.fields import is_deployment_key

log = logging.getLogger(__name__)

# How long a Lease round waits for the store before the shards it took count as held (their calls then answered
# here): long enough for a store that answers, short against the renewals the round owes the shards it holds.
READ_WAIT_S = 1.0


class ShardsHeld(Protocol):
    """``kvpilot.runtime.shards.ShardCoordinator``: which shards are held now, and of which a deployment is."""

    @property
    def owned(self) -> frozenset[int]: ...

    def shard(self, deployment: str) -> int: ...

    def in_force_at(self, shard: int) -> float | None: ...


class StoredAnswers:
    """A ``DecisionSource`` for KEDA (gRPC and the metrics-api route): the loop's board, and for a deployment of a
    shard held whose tick has not yet decided it, the decision its previous holder stored.

    A stored decision is published with version 0 ("no decision" to the board): a ``StreamIsActive`` that answered
    it waits on the board for the first real one, which replaces it. ``read_taken`` runs in the Lease round's
    thread; ``decided`` in the loop's; ``latest`` on the event loop: the answers are swapped whole under a lock."""

    def __init__(
        self,
        board: DecisionSource,
        shards: ShardsHeld,
        stored: Callable[[], Mapping[str, Decision]],
        *,
        wait_s: float = READ_WAIT_S,
        clock: Callable[[], float] | None = None,
        rewritten_every_s: float = 60.0,
    ) -> None:
        """``stored``: the newest stored decision of every deployment (a blocking store read). ``clock``: the wall
        time the log line measures the answers' age on (None: not said). ``rewritten_every_s``: how often a holder
        deciding a deployment stores its unchanged decision again (the loop's ``decision_heartbeat_s``)."""
        self._board = board
        self._shards = shards
        self._stored = stored
        self.wait_s = wait_s
        self._clock = clock
        self.rewritten_every_s = rewritten_every_s
        self._lock = threading.Lock()
        # deployment -> (its shard, the stored decision, until when it was known in force: None, its own time)
        self._answers: dict[str, tuple[int, Decision, float | None]] = {}
        self._decided: set[int] = set()  # shards a tick has decided since they were taken: their answers are its
        self.served_total = 0  # calls answered from a stored decision

    # -- the Lease round's side -----------------------------------------------------------------------------------

    def read_taken(self, gained: frozenset[int]) -> None:
        """The stored decisions of the deployments of ``gained`` (the shards a round just took), read in a thread of
        their own; the round waits ``wait_s`` at most, so a store that hangs delays no renewal past it (its answers
        are then kept when they come)."""
        with self._lock:
            self._decided -= gained
        in_force = {s: self._shards.in_force_at(s) for s in gained}  # as the take read them, before we renew them
        done = threading.Event()

        def read() -> None:
            try:
                stored = self._stored()
            except Exception as e:  # the store is away: the tick decides the shard without them, as before
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                log.error("shards %s taken: their stored decisions not read (%s)", sorted(gained), why)
                return
            finally:
                done.set()
            self._keep(gained, stored, in_force)

        threading.Thread(target=read, name="shards-stored-answers", daemon=True).start()
        if not done.wait(self.wait_s):
            log.warning(
                "shards %s taken: the store did not answer within %g s; KEDA gets NOT_FOUND for their deployments "
                "until it does or this instance's tick decides them",
                sorted(gained),
                self.wait_s,
            )

    def _keep(
        self, gained: frozenset[int], stored: Mapping[str, Decision], in_force: Mapping[int, float | None]
    ) -> None:
        taken = {
            key: (shard, d, self._current_at(d, in_force.get(shard)))
            for key, d in stored.items()
            if is_deployment_key(key) and (shard := self._shards.shard(key)) in gained
        }
        held = self._shards.owned
        with self._lock:
            gained = gained - self._decided  # a read that came after the tick decided them has nothing to add
            kept = {k: v for k, v in self._answers.items() if v[0] in held and v[0] not in gained}
            self._answers = kept | {k: v for k, v in taken.items() if v[0] in gained}
            count = sum(1 for v in self._answers.values() if v[0] in gained)
        if count:
            newest = max(at or d.timestamp for _, d, at in taken.values())
            age = "" if self._clock is None else f", the newest {self._clock() - newest:.1f} s old"
            log.info(
                "shards %s taken: KEDA is answered from %d stored decisions%s, until this instance's tick decides them",
                sorted(gained),
                count,
                age,
            )

    def _current_at(self, decision: Decision, in_force: float | None) -> float | None:
        """Until when ``decision`` (a stored row) was in force by its shard's Lease: None where the Lease says nothing,
        or where the row is a heartbeat or more older than that time (its holder did not store it again: not a
        deployment it was deciding)."""
        if in_force is None or not 0.0 <= in_force - decision.timestamp < self.rewritten_every_s:
            return None
        return in_force

    # -- the control loop's side ----------------------------------------------------------------------------------

    def decided(self, shards: frozenset[int]) -> None:
        """``shards`` had a whole tick since they were taken: the board holds their decisions (a deployment the tick
        did not decide, deleted meanwhile, is no longer answered)."""
        if not shards:
            return
        with self._lock:
            self._decided |= shards
            if any(v[0] in shards for v in self._answers.values()):
                self._answers = {k: v for k, v in self._answers.items() if v[0] not in shards}

    # -- DecisionSource --------------------------------------------------------------------------------------------

    def latest(self, deployment: str) -> Published | None:
        published = self._board.latest(deployment)
        if published is not None:
            return published
        with self._lock:
            found = self._answers.get(deployment)
        if found is None or found[0] not in self._shards.owned:  # never for a shard this instance does not hold
            return None
        self.served_total += 1
        return Published(found[1], 0, current_at=found[2])

    def deployments(self) -> list[str]:
        with self._lock:
            answers = dict(self._answers)
        held = self._shards.owned
        return sorted({*self._board.deployments(), *(k for k, (shard, _, _) in answers.items() if shard in held)})

    async def wait_for_change(self, deployment: str, seen_version: int, timeout_s: float) -> Published | None:
        await self._board.wait_for_change(deployment, seen_version, timeout_s)
        return self.latest(deployment)
