"""What each tick of the control loop writes to the store: open findings, the deployments seen (when new or changed,
else once a minute), per-minute roll-ups, decisions that changed (or whose heartbeat is due), each deployment's
capacity once a minute, and the retention pass.

Writes are queued on the ``BufferedWriter``, which applies them in order in a worker thread (or holds them while the
store is away); nothing here waits for the database. Split out of ``kvpilot.runtime.loop`` (issue 15), unchanged.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from collector.state import DeploymentView
from detectors.finding import Finding
from scaler.decision import Decision
from scaler.own_raise import planner_replicas
from store import repo
from store.buffer import WRITES_IN_BATCH, BufferedWriter, Write
from store.fields import fit
from store.models import RollupRow
from store.repo.deployments import SeenDeployment
from store.repo.findings import Reporter

log = logging.getLogger(__name__)

# A deployment's last_seen is rewritten at most this often while nothing else about it changes (issue 17).
SEEN_EVERY_S = 60.0

Capacity = Callable[[str], tuple[float, str] | None]  # ``Remembers.capacity``: (requests/s, "learned"|"configured")


@dataclass(eq=False, slots=True)
class _TickRollups:
    """One tick's roll-up folds: the deployments (as stored) in the order their folds are queued, and the minute."""

    keys: list[str]
    minute: int


def _record_rollup(
    session: Session, *, tick: _TickRollups, index: int, deployment: str, t: float, signals: dict[str, float | None]
) -> None:
    repo.record_rollup(
        session=session, deployment=deployment, t=t, signals=signals, read=_read_ahead(session, tick, index)
    )


def _read_ahead(session: Session, tick: _TickRollups, index: int) -> dict[tuple[str, int], RollupRow | None]:
    """The minute's roll-up rows of the tick's fold ``index`` and of its folds after it in this session's batch
    (``store.buffer.WRITES_IN_BATCH``), read in one SELECT by the first of them the session applies, and held for the
    session: each fold then finds its row, or knows it is absent, without asking the database (a SELECT and an
    autoflush per deployment cost 0.85 ms of CPU each). Before, one write queued ahead of the tick's folds read the
    rows: a flush that took the tick's first writes and left the rest to the next batch (a flush running while the
    loop queued them; a tick of more writes than the writer's chunk, at fleet scale) had every fold of the next batch
    read its row alone, and the minute's first folds read their absent rows one by one. A write applied alone
    (``BufferedWriter`` isolating a bad one) reads its own row only, as before."""
    reads: dict[_TickRollups, tuple[range, dict[tuple[str, int], RollupRow | None]]]
    reads = session.info.setdefault("rollups", {})  # the identity map holds its objects weakly: held here
    done = reads.get(tick)
    if done is not None and index in done[0]:
        return done[1]
    end = min(len(tick.keys), index + max(1, int(session.info.get(WRITES_IN_BATCH, 1))))
    keys = tick.keys[index:end]
    found: dict[tuple[str, int], RollupRow | None] = dict.fromkeys(((k, tick.minute) for k in keys), None)
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        for row in session.scalars(
            select(RollupRow).where(RollupRow.minute == tick.minute, RollupRow.deployment.in_(chunk))
        ):
            found[(row.deployment, row.minute)] = row
    reads[tick] = (range(index, end), found)
    return found


def rollup_signals(
    deployments: Mapping[str, DeploymentView], gateways: Mapping[str, float]
) -> dict[str, dict[str, float | None]]:
    """The tick's roll-up signals by deployment: each view's, with the arrival rate the planner read
    (``planner_arrival_rate``: the gateway's where ``gateways`` names the deployment, else the engines' estimate) and
    whether it was a gateway's (``gateway_arrival_share`` 1 or 0; None where the planner read no rate), so that the
    warm start after a restart feeds the forecasters the series they read. A deployment only the gateway names (at
    zero replicas: the collector sees none) gets those two signals alone."""
    out: dict[str, dict[str, float | None]] = {}
    for key, v in deployments.items():
        signals = v.values()
        gateway = gateways.get(key)
        read = signals.get("arrival_rate") if gateway is None else gateway
        signals["planner_arrival_rate"] = read
        signals["gateway_arrival_share"] = None if read is None else 0.0 if gateway is None else 1.0
        out[key] = signals
    for key, gateway in gateways.items():
        if key not in out:
            out[key] = {"planner_arrival_rate": gateway, "gateway_arrival_share": 1.0}
    return out


def _record_decision(session: Session, *, decision: Decision) -> None:
    repo.record_decision(session=session, decision=decision)


def _record_capacity(session: Session, *, deployment: str, rps: float, source: str, now: float) -> None:
    repo.upsert_capacity(
        session=session, deployment=deployment, requests_per_s=rps, tokens_per_s=None, source=source, now=now
    )


def _changed(a: Decision | None, b: Decision) -> bool:
    """Whether ``b`` is stored at once rather than at the heartbeat: its counts or reason moved, or the planner's
    count under kvpilot's own raise (``scaler.own_raise``), which a restarted instance resumes from the row."""
    if a is None:
        return True
    return (a.desired_replicas, a.warm_pool, a.reason, a.current_replicas, a.ready_replicas, planner_replicas(a)) != (
        b.desired_replicas,
        b.warm_pool,
        b.reason,
        b.current_replicas,
        b.ready_replicas,
        planner_replicas(b),
    )


def _utc(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return f"{t:g} s since the epoch"


def _due(elapsed_s: float, every_s: float) -> bool:
    """Whether a write made every ``every_s`` and last made ``elapsed_s`` ago (wall time, as stored) is due. A negative
    time is due too: the wall clock stepped back since (NTP), and waiting until it passed the last write again left
    nothing written for as long as the step (an hour)."""
    return not 0.0 <= elapsed_s < every_s


class StoredThrough:
    """Until when each deployment's newest stored decision was still the one in force: the time of the last tick
    that decided it whose writes the store committed (an unchanged decision is not stored again before its heartbeat,
    so its row's own time says less). With sharding, a shard's Lease carries the earliest of these for its
    deployments (``ShardCoordinator``), and the instance that takes the shard over judges the rows' age from it
    (``kvpilot.runtime.taken_answers``). Set in the store writer's thread, read in the Lease round's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._through: dict[str, float] = {}  # deployment -> the tick committed that decided it
        self._kept: frozenset[str] = frozenset()  # the deployments whose decisions the loop kept at that tick

    def mark(self, now: float, decided: Collection[str], kept: Collection[str]) -> Write:
        """The write queued after a tick's decisions: once its transaction commits, every deployment in ``decided``
        has its newest row in force at ``now`` (the rows of the writes queued before it committed first)."""
        decided, kept = frozenset(decided), frozenset(kept)

        def committed(_session: Session) -> None:
            with self._lock:
                through = {k: t for k, t in self._through.items() if k in kept}
                through.update(dict.fromkeys(decided, now))
                self._through, self._kept = through, kept

        def write(session: Session) -> None:
            event.listen(session, "after_commit", committed, once=True)

        return write

    def by_shard(self, shard: Callable[[str], int]) -> dict[int, float]:
        """Shard -> the earliest time through which its kept deployments' rows are known in force; a shard with a
        deployment kept but not yet decided by a committed tick (resumed, new, its writes still pending) has none."""
        with self._lock:
            through, kept = self._through, self._kept
        out: dict[int, float] = {}
        for key in kept:
            s = shard(key)
            out[s] = min(out.get(s, math.inf), through.get(key, -math.inf))
        return {s: t for s, t in out.items() if t > -math.inf}


class TickWrites:
    """The loop's writes, and the decisions last stored (``stored``: the loop publishes and forgets from it too)."""

    def __init__(
        self,
        writer: BufferedWriter,
        *,
        retention_s: float,
        prune_every_s: float,
        decision_heartbeat_s: float,
        drains_kept_s: float = 0.0,
        seen_every_s: float = SEEN_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self._monotonic = monotonic
        self._started: tuple[float, float] | None = None  # this process's first tick: (wall, monotonic)
        self._guarding = True  # till a prune goes ahead (``_prune``)
        self._refused_said = False
        self.retention_s = retention_s
        self.drains_kept_s = drains_kept_s  # drains.budget_window_s with a budget: the drains it counts stay
        self.prune_every_s = prune_every_s
        self.decision_heartbeat_s = decision_heartbeat_s  # an unchanged decision is still stored this often
        self.stored: dict[str, Decision] = {}
        self._last_prune: float | None = None
        self._capacity_at = float("-inf")
        self.seen_every_s = seen_every_s  # an unchanged deployment's last_seen is rewritten this often
        self._seen: dict[str, tuple[float, str | None, str | None]] = {}  # key -> (written at, engine, model)
        self.through = StoredThrough()

    def persist(
        self,
        now: float,
        deployments: Mapping[str, DeploymentView],
        findings: list[Finding],
        decisions: list[Decision],
        *,
        detected: bool,
        capacity: Capacity | None,
        closes: Callable[[str, str, str, str, float], bool] | None = None,
        reporter: Reporter | None = None,
        gateways: Mapping[str, float] | None = None,
    ) -> None:
        """Queue this tick's writes; the writer task applies them (or holds them while the store is away).
        ``closes(deployment, replica, node, gpu, quiet_s)``: the live findings this instance may close (sharding;
        None: all; ``store.repo.findings.Closes``); ``reporter``: this instance, when sharded (another's view of a
        finding, as severe, holds against its own: ``store.repo.findings.Reporter``); ``gateways``: the arrival
        rates the planner read from a gateway, by deployment (``rollup_signals``)."""
        if self._started is None:
            self._started = (now, self._monotonic())
        queue: list[tuple[str, Write]] = []  # queued in one step (BufferedWriter.submit_all): never half a tick
        if detected:
            active = list(findings)
            queue.append(
                (
                    "findings",
                    lambda s: repo.upsert_findings(session=s, active=active, now=now, closes=closes, reporter=reporter),
                )
            )
        seen = self._seen_due(now, deployments)
        if seen:
            queue.append(("deployments", lambda s: repo.upsert_deployments(session=s, seen=seen, now=now)))
        rollups = rollup_signals(deployments, gateways or {})
        tick = _TickRollups([fit(k, 253) for k in rollups], int(now // 60))
        for i, (key, signals) in enumerate(rollups.items()):
            fold = partial(_record_rollup, tick=tick, index=i, deployment=key, t=now, signals=signals)
            queue.append((f"rollup {key}", fold))
        for d in decisions:
            prior = self.stored.get(d.deployment)
            if _changed(prior, d) or prior is None or _due(d.timestamp - prior.timestamp, self.decision_heartbeat_s):
                self.stored[d.deployment] = d
                queue.append((f"decision {d.deployment}", partial(_record_decision, decision=d)))
        if decisions:
            queue.append(("decisions in force", self.through.mark(now, [d.deployment for d in decisions], self.stored)))
        if capacity is not None:
            queue += self._capacity_writes(now, deployments, capacity)
        if self._last_prune is None or _due(now - self._last_prune, self.prune_every_s):
            self._last_prune = now
            horizon = self.retention_s
            started, since = self._started
            past = started if self._monotonic() - since < horizon else None
            queue.append(("retention", partial(self._prune, now=now, horizon_s=horizon, past_before=past)))
        self.writer.submit_all(queue)

    def _prune(self, session: Session, *, now: float, horizon_s: float, past_before: float | None) -> None:
        """The retention pass. This process's first one is refused if it would delete every row written before this
        process started (``past_before``, its first tick; the newest of them older than the horizon): that reads as a
        clock far ahead at the start (NTP not synced yet, a wrong RTC) as well as a stop longer than the horizon, and
        the one cannot be told from the other. Before, a start on a clock ahead by more than the horizon deleted the
        whole history at its first tick. Said once. The next passes are refused on the same test until one goes ahead
        (the clock put right: a step back) or this process has run for the horizon (``past_before`` None); from then
        on, and from a first pass that goes ahead (a correct clock), rows age out as before."""
        if past_before is not None and self._guarding:
            newest = repo.newest_stored(session=session, before=past_before)
            if newest is not None and newest < now - horizon_s:
                if not self._refused_said:
                    self._refused_said = True
                    log.warning(
                        "retention: every row written before this start is older than the horizon (the newest at "
                        "%s, the clock reads %s, store.retention_days %g): nothing deleted. A clock that far ahead "
                        "cannot be told from a stop that long; rows age out as before once kvpilot has run %g days, "
                        "or once the clock is right",
                        _utc(newest), _utc(now), horizon_s / 86400, horizon_s / 86400,
                    )  # fmt: skip
                return
        pruned = repo.prune(session=session, now=now, horizon_s=horizon_s, drains_kept_s=self.drains_kept_s)
        log.info("retention: %s", pruned)
        self._guarding = False

    def _seen_due(self, now: float, deployments: Mapping[str, DeploymentView]) -> list[SeenDeployment]:
        """The deployments whose row needs a write: new to this process, a new engine or model, or last written
        ``seen_every_s`` ago. The rest are left as they are: a SELECT and an UPDATE of every deployment each tick
        was most of the store's work in a steady fleet, and ``last_seen`` is read by operators, to the minute."""
        due = []
        for key, v in deployments.items():
            sample = v.replicas[0].sample if v.replicas else None
            engine, model = (sample.engine, sample.model) if sample is not None else (None, None)
            last = self._seen.get(key)
            if last is not None:
                # the store keeps a known engine and model when a tick reads none (upsert_deployments)
                engine, model = engine or last[1], model or last[2]
                if (engine, model) == last[1:] and not _due(now - last[0], self.seen_every_s):
                    continue
            self._seen[key] = (now, engine, model)
            due.append(SeenDeployment(key, engine, model))
        if len(self._seen) > 2 * len(deployments) + 1000:  # deployments gone (or moved to another shard)
            self._seen = {k: w for k, w in self._seen.items() if k in deployments}
        return due

    def _capacity_writes(
        self, now: float, deployments: Mapping[str, DeploymentView], capacity: Capacity
    ) -> list[tuple[str, Write]]:
        """Once a minute, what one replica of each deployment sustains (learned or configured), for operators."""
        if not _due(now - self._capacity_at, self.decision_heartbeat_s):
            return []
        self._capacity_at = now
        writes: list[tuple[str, Write]] = []
        for key in deployments:
            known = capacity(key)
            source = None if known is None else {"learned": "observed", "configured": "configured"}.get(known[1])
            if known is not None and source is not None:
                rps = known[0]
                write = partial(_record_capacity, deployment=key, rps=rps, source=source, now=now)
                writes.append((f"capacity {key}", write))
        return writes
