"""What a previous run left in the store, read once at start: open findings (so hysteresis does not flap them, and the
GPUs their ``vanished`` findings name are known to be gone: ``vanished_gpus``), the last decision of every deployment
(published again at once, so KEDA keeps its target), the per-minute arrival rates that warm each deployment's
forecaster and each deployment's learned capacity (``seed_capacity``). ``kvpilot.runtime.service.Service.start``
resumes from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from collector.samples import GpuSample
from detectors import stuck_gpu
from detectors.finding import Finding
from kvpilot.runtime.loop import Decide, Remembers
from scaler.capacity import CapacityModel
from scaler.decision import Decision
from store import repo
from store.db import transaction
from store.errors import driver_words
from store.fields import is_deployment_key
from store.repo.rollups import RollupPoint

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Restored:
    """What a previous run left in the store."""

    findings: list[Finding] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    rollups: list[RollupPoint] = field(default_factory=list)
    # per deployment, the learned capacity (requests/s a replica at the reference mix) stored within history_s
    capacities: dict[str, float] = field(default_factory=dict)


def restore(sessions: sessionmaker[Session], *, now: float, history_s: float) -> Restored:
    """Read the resumable state; an unreachable store means starting empty (and saying so), not failing. It only
    reads, so on SQLite it does not wait for another kvpilot's write lock (``store.db.transaction``'s
    ``reads_only``). ``history_s`` (``scaler.warm_start_s``) bounds what still describes a deployment: the roll-ups
    that warm its forecaster and its learned capacity (``seed_capacity``) stored within it."""
    try:
        with transaction(sessions, reads_only=True) as s:
            learned = repo.learned_capacities(session=s, since=now - history_s) if history_s > 0 else {}
            return Restored(
                findings=repo.open_findings(session=s),
                decisions=repo.latest_decisions(session=s),
                rollups=repo.load_rollups(session=s, since=now - history_s),
                capacities={key: rps for key, (rps, _) in learned.items()},
            )
    except SQLAlchemyError as e:
        log.error("store unreachable at start, starting without history: %s", driver_words(e))
        return Restored()


def restore_taken(
    sessions: sessionmaker[Session], *, now: float, history_s: float, ours: Callable[[str], bool]
) -> Restored:
    """What a shard taken over mid-run resumes besides its stored decisions (``kvpilot.runtime.shards.Takeover``), as
    ``restore`` reads it at start: the open findings (their vanished GPUs: ``vanished_gpus``) and the learned
    capacity of the deployments ``ours`` says are of the shards taken. A store error is raised (the takeover logs it
    and decides without them)."""
    with transaction(sessions, reads_only=True) as s:
        learned = repo.learned_capacities(session=s, since=now - history_s) if history_s > 0 else {}
        return Restored(
            findings=repo.open_findings(session=s),
            capacities={key: rps for key, (rps, _) in learned.items() if ours(key)},
        )


def vanished_gpus(findings: Iterable[Finding]) -> list[GpuSample]:
    """The GPUs the restored open ``stuck_gpu`` findings say vanished from their exporter, as absent GPUs for
    ``FleetState.seed_absent``: keyed node/UUID (or node/index) as their exporter lists them, so that the new process
    knows they are gone and the finding stays open (and its drain requested) until the GPU is listed again or its
    node goes. A finding's subject names the GPU (``stuck_gpu.gpu_subject``, ``physical_subject``): a whole GPU, one
    MIG instance (evidence ``physical_gpu``) or a MIG GPU with all its instances (evidence ``mig_instances``); its
    index is not stored, so a GPU known by UUID is named by it in the summary. A finding on no node (a node-less GPU
    page) cannot be keyed and is left out. Last seen: the finding's ``since``, about when the GPU vanished."""
    out: list[GpuSample] = []
    for f in findings:
        conditions = str(f.evidence.get("conditions") or f.evidence.get("condition") or "").split(",")
        node, gpu = f.subject.node, f.subject.gpu
        if f.kind != stuck_gpu.KIND or "vanished" not in conditions or not node or not gpu:
            continue
        physical = f.evidence.get("physical_gpu")
        instances = str(f.evidence.get("mig_instances") or "")
        if isinstance(physical, str) and physical and "/mig" in gpu:  # one MIG instance, by UUID
            instance = gpu.rsplit("/mig", 1)[1]
            out.append(_absent(node, f"{physical}/{instance}", physical, instance, f.since))
        elif isinstance(physical, str) and physical and "/" in gpu:  # one MIG instance, by gpu/instance index
            out.append(_absent(node, gpu, None, gpu.split("/", 1)[1], f.since))
        elif instances:  # a MIG GPU gone with all its instances
            uuid = None if gpu.isdigit() else gpu
            for instance in (i for i in instances.split(",") if i):
                out.append(_absent(node, f"{gpu}/{instance}", uuid, instance, f.since))
        else:  # a whole GPU: its UUID, or its index where the exporter names none
            out.append(_absent(node, gpu, None if gpu.isdigit() else gpu, None, f.since))
    return out


def _absent(node: str, index: str, uuid: str | None, instance: str | None, since: float) -> GpuSample:
    return GpuSample(node=node, index=index, uuid=uuid, model_name=None, timestamp=since, mig_instance=instance)


def publishable(decisions: dict[str, Decision]) -> dict[str, Decision]:
    """The restored decisions that can be published again; a row an older version stored for a name that is not
    ``namespace/name`` (``probe/a/b``) is skipped with an error naming it, so that it can never stop a start."""
    good: dict[str, Decision] = {}
    for key, d in decisions.items():
        if is_deployment_key(key):
            good[key] = d
        else:
            log.error("stored decision for %r skipped: not a Kubernetes namespace/name; it is not published", key)
    return good


def warm_start(planner: Decide, rollups: list[RollupPoint]) -> int:
    """Feed the stored per-minute arrival rates to each deployment's forecaster; returns points fed. The rate fed is
    the one the planner read (``planner_arrival_rate``: a gateway's where ``collector.arrivals`` or the scale source
    gave one), so a forecaster fed a gateway's rate warms from the gateway's minutes, not from the engines' estimate
    it no longer reads; a minute stored before that column existed (revision 0005) gives its ``arrival_rate``, what
    the planner read then.

    Works with planners that keep per-deployment models (``kvpilot.runtime.loop.Remembers``); others are skipped.
    """
    if not isinstance(planner, Remembers):
        return 0
    fed = 0
    for p in rollups:
        rate = p.values.get("planner_arrival_rate")
        if rate is None:
            rate = p.values.get("arrival_rate")
        if rate is not None:
            planner.warm(p.deployment, p.t + 30.0, rate)  # the minute's midpoint
            fed += 1
    return fed


@runtime_checkable
class _Plans(Protocol):
    """A planner that keeps a model per deployment (``scaler.planner.Planner``, ``scaler.pools.PooledPlanner``)."""

    def planner_for(self, key: str) -> object: ...


def seed_capacity(planner: Decide, capacities: dict[str, float]) -> int:
    """Start each deployment's capacity model from the learned capacity a previous run stored (``Restored.capacities``,
    written once a minute by ``kvpilot.runtime.persist``), so a restart during a burst sizes from the first tick
    instead of holding (``no_capacity``) until the replicas saturate again for ``min_learned_samples`` ticks. A model
    with a profile or a configured capacity plans with that as before (the seed is reported beside it as learned);
    returns the deployments seeded."""
    if not isinstance(planner, _Plans):
        return 0
    seeded = 0
    for key, rps in capacities.items():
        if not is_deployment_key(key):
            continue
        model = getattr(planner.planner_for(key), "capacity", None)
        if isinstance(model, CapacityModel) and model.seed_learned(rps):
            seeded += 1
    return seeded
