"""KEDA's answers for a shard just taken over, before this instance's tick decides it (issue 17, sharding).

From the moment a Lease round takes a shard, KEDA's calls for its deployments are answered here (``route``: local),
but the control loop decides them only from its next tick (``kvpilot.runtime.shards.Takeover``), up to one interval
later. The board had no decision for them meanwhile: KEDA got ``NOT_FOUND``, which it counts as a failed call
(``fallback.failureThreshold`` of them in a row and the ScaledObject goes to its fallback replicas). Now the round
that takes a shard reads the decisions its previous holder stored (the rows the tick resumes from: the last
published count, the rollout raise included) before the shard counts as held, and those are answered for its
deployments until the tick publishes its own. Only for a shard held at the moment of the call; a stored decision
older than the staleness limit is refused as the board's would be (``UNAVAILABLE``: ``DecisionReader``).
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
    ) -> None:
        """``stored``: the newest stored decision of every deployment (a blocking store read). ``clock``: the wall
        time the log line measures the answers' age on (None: not said)."""
        self._board = board
        self._shards = shards
        self._stored = stored
        self.wait_s = wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[int, Decision]] = {}  # deployment -> (its shard, the stored decision)
        self._decided: set[int] = set()  # shards a tick has decided since they were taken: their answers are its
        self.served_total = 0  # calls answered from a stored decision

    # -- the Lease round's side -----------------------------------------------------------------------------------

    def read_taken(self, gained: frozenset[int]) -> None:
        """The stored decisions of the deployments of ``gained`` (the shards a round just took), read in a thread of
        their own; the round waits ``wait_s`` at most, so a store that hangs delays no renewal past it (its answers
        are then kept when they come)."""
        with self._lock:
            self._decided -= gained
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
            self._keep(gained, stored)

        threading.Thread(target=read, name="shards-stored-answers", daemon=True).start()
        if not done.wait(self.wait_s):
            log.warning(
                "shards %s taken: the store did not answer within %g s; KEDA gets NOT_FOUND for their deployments "
                "until it does or this instance's tick decides them",
                sorted(gained),
                self.wait_s,
            )

    def _keep(self, gained: frozenset[int], stored: Mapping[str, Decision]) -> None:
        taken = {
            key: (shard, d)
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
            newest = max(d.timestamp for _, d in taken.values())
            age = "" if self._clock is None else f", the newest {self._clock() - newest:.1f} s old"
            log.info(
                "shards %s taken: KEDA is answered from %d stored decisions%s, until this instance's tick decides them",
                sorted(gained),
                count,
                age,
            )

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
        return Published(found[1], 0)

    def deployments(self) -> list[str]:
        with self._lock:
            answers = dict(self._answers)
        held = self._shards.owned
        return sorted({*self._board.deployments(), *(k for k, (shard, _) in answers.items() if shard in held)})

    async def wait_for_change(self, deployment: str, seen_version: int, timeout_s: float) -> Published | None:
        await self._board.wait_for_change(deployment, seen_version, timeout_s)
        return self.latest(deployment)
